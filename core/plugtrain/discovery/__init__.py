"""Finding plugins: loading and isolating them, their API compatibility, attribution.

:mod:`.loading` finds the installed plugins through their entry points, checks their declared
plugin API before importing them (:mod:`.compat`), isolates a failing one, and builds the
process-wide registry; :mod:`.attribution` says which plugin an object or an error comes from.
"""
