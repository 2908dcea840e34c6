"""Reading run files: YAML that remembers where every value came from, and ``--set`` overrides."""
