"""Commands on a run file.

``check`` (with the ``config.json`` of a Hugging Face ``ckpt_path``), ``fit``, ``validate`` and
``validate_all``, ``plot``, and ``schema`` (the JSON Schema of run files).
"""
