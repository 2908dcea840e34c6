"""The training framework (imports torch): the Trainer, and the rooms it is built from.

The core's rooms below it (``registry``, ``contract``, ``discovery``, ``bases``) and
``plugtrain.config`` never import it; it builds components through the registry and runs them;
``plugtrain.launching`` starts its processes.
Public here: :class:`plugtrain.train.trainer.Trainer` (also ``plugtrain.Trainer``). The Trainer
is a facade over rooms with one job each, from the ground up: ``components`` (building one
component), ``observability`` (logs, metrics, throughput), ``data`` (the sample order and the
data stream), ``distributed`` (signals, DTensor state), ``loop`` (the steps and
evaluation), ``checkpointing`` (checkpoints and the trainer's state); ``assembly`` (a Trainer from a
run file's plan, and running the file) stands above the facade. A room imports only lower rooms,
through their ``__init__``; the rooms' modules are private.
"""
