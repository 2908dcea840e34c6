"""The training framework (imports torch): the Trainer, building a run from its plan, launching.

The upper floor of plugtrain. The small core (``plugtrain``'s top-level modules) and
``plugtrain.config`` never import it; it builds components through the registry and runs them.
Public here: :class:`plugtrain.train.trainer.Trainer` (also ``plugtrain.Trainer``),
:mod:`plugtrain.train.optim` (also ``plugtrain.optim``, mirroring ``cerebras.pytorch.optim``),
:mod:`plugtrain.train.distributed` and :func:`plugtrain.train.backends.backend`.
"""
