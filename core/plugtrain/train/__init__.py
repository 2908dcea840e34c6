"""The training framework (imports torch): the Trainer, building a run from its plan, launching.

The upper floor of plugtrain. The small core (``plugtrain``'s top-level modules) and
``plugtrain.config`` never import it; it builds components through the registry and runs them.
Public here: :class:`plugtrain.train.trainer.Trainer` (also ``plugtrain.Trainer``),
:func:`plugtrain.train.backends.backend` (also ``plugtrain.backend``). The Trainer is a facade
over parts with one job each: ``assembly`` (a Trainer from a plan), ``components`` (building
one component), ``loop``, ``nan_guard``, ``evaluation``, ``trainer_state`` and ``checkpointer``.
"""
