"""The plugin author's contract: every hook plugtrain calls.

A plugin is a module (or any object) with functions marked ``@plugtrain.hookimpl`` whose names
are hooks below. Installed plugins are found through the entry-point group ``plugtrain``::

    [project.entry-points.plugtrain]
    sophia = "acme_plugtrain_sophia.plugin"

The core calls every ``plugtrain_register_*`` hook once, the first time a registry is needed
(on the first ``plugtrain.resolve``, ``plugtrain.names``, ``plugtrain list`` ...), one plugin
at a time so that a plugin whose hook raises is reported and skipped without harming the others.
Registration must stay cheap and must not import torch or the implementation: a component is
declared by an import string (``"package.module:Class"``) and an argument schema (an attrs class
from a module that does not import torch, see :mod:`plugtrain.schema`); plugtrain imports the
implementation on first use.

None of the hooks is ``firstresult`` or historic; their return values are ignored.

Two more calls of the registrar serve bridges to other libraries (``plugtrain-bridges``):
``registry.register(..., defer=True)`` declares a component that gives way: where another plugin
provides its name, the bare name keeps meaning that one (no conflict) and the deferring component
answers only to ``"plugin:Name"`` (``"pytorch-optimizer:Lamb"``); ``registry.not_installed(names,
"package")`` registers nothing and makes the unknown-name error of those names say which package
to install.

What a registered component must *be* (the methods the Trainer, the wrappers and ``plot`` call)
is stated in :mod:`plugtrain.protocols`, one protocol per kind; ``docs/plugin-api.md`` lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from plugtrain.registry.components import ComponentRegistrar

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "plugtrain"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -------------------------------------------------------------------------------------------
# optimizers


@hookspec
def plugtrain_register_optimizers(registry: ComponentRegistrar) -> None:
    """Declare optimizers; called once when a registry is built.

    An optimizer is constructed as ``Optimizer(params, **arguments)`` where ``params`` is an
    iterable of tensors, of ``(name, tensor)`` pairs or of param-group dicts, and returns a
    ``torch.optim.Optimizer`` (:class:`plugtrain.protocols.Optimizer`).

    :param registry: call ``registry.register("SGD", "pkg.sgd:SGD", schema=SGDArgs)`` for each
        optimizer; the name is what users write in run files.
    :returns: nothing; the return value is ignored.
    """


# -------------------------------------------------------------------------------------------
# schedulers


@hookspec
def plugtrain_register_schedulers(registry: ComponentRegistrar) -> None:
    """Declare learning-rate and weight-decay schedulers; called once when a registry is built.

    A scheduler is constructed as ``Scheduler(optimizer, **arguments)``; wrappers such as
    ``SequentialLR`` receive their children as already-built schedulers.

    :param registry: call ``registry.register(name, "pkg.module:Class", schema=Args)`` for each
        scheduler.
    :returns: nothing; the return value is ignored.
    """


# -------------------------------------------------------------------------------------------
# backends


@hookspec
def plugtrain_register_backends(registry: ComponentRegistrar) -> None:
    """Declare backends (``CPU``, ``GPU``, ``CSX`` ...); called once when a registry is built.

    A backend is constructed as ``Backend(**arguments)`` and meets
    :class:`plugtrain.protocols.Backend` (derive from :class:`plugtrain.backend_base.BackendBase`
    for the single-process defaults); the name is the ``backend_type`` (or ``device``) users
    write. Only one backend type may exist per process.

    :param registry: call ``registry.register(name, "pkg.module:Class", schema=Args)`` for each
        backend.
    :returns: nothing; the return value is ignored.
    """


# -------------------------------------------------------------------------------------------
# what a run needs besides the above


@hookspec
def plugtrain_register_models(registry: ComponentRegistrar) -> None:
    """Declare models a run file can name; called once when a registry is built.

    A model is constructed as ``Model(**arguments)`` and returns a ``torch.nn.Module``
    (:class:`plugtrain.protocols.Model` says what ``forward`` receives and how the loss is
    computed).

    :param registry: call ``registry.register(name, "pkg.module:Class", schema=Args)`` for each
        model.
    :returns: nothing; the return value is ignored.
    """


@hookspec
def plugtrain_register_dataloaders(registry: ComponentRegistrar) -> None:
    """Declare data loaders a run file can name; called once when a registry is built.

    A data loader is constructed as ``factory(**arguments)`` and returns an iterable of batches
    (usually a ``torch.utils.data.DataLoader``; see :class:`plugtrain.protocols.DataLoader`).

    :param registry: call ``registry.register(name, "pkg.module:factory", schema=Args)`` for
        each data loader.
    :returns: nothing; the return value is ignored.
    """


# -------------------------------------------------------------------------------------------
# callbacks and loggers


@hookspec
def plugtrain_register_callbacks(registry: ComponentRegistrar) -> None:
    """Declare callbacks (``trainer.init.callbacks``); called once when a registry is built.

    A callback is constructed as ``Callback(**arguments)`` and defines any of the methods of
    :class:`plugtrain.protocols.Callback`; the Trainer calls the ones it defines, in list order,
    the closing ones (``*_end``, ``on_after_*``) in reverse list order.

    :param registry: call ``registry.register(name, "pkg.module:Class", schema=Args)`` for each
        callback.
    :returns: nothing; the return value is ignored.
    """


@hookspec
def plugtrain_register_loggers(registry: ComponentRegistrar) -> None:
    """Declare metric loggers (``trainer.init.loggers``); called once when a registry is built.

    A logger is constructed as ``Logger(**arguments)`` and meets
    :class:`plugtrain.protocols.Logger`; every record the Trainer writes goes to every logger.

    :param registry: call ``registry.register(name, "pkg.module:Class", schema=Args)`` for each
        logger.
    :returns: nothing; the return value is ignored.
    """


# -------------------------------------------------------------------------------------------
# weight sparsity


@hookspec
def plugtrain_register_sparsity(registry: ComponentRegistrar) -> None:
    """Declare weight-sparsity algorithms (``trainer.init.sparsity``); called once per registry.

    A sparsity algorithm is constructed as ``Algorithm(params, **arguments)``, where ``params`` is
    the list of ``(name, parameter)`` pairs its group's parameter filter selected (and no earlier
    group took), and meets :class:`plugtrain.protocols.SparsityAlgorithm`: it only decides masks
    (initial ones, and new ones at its update steps); the core keeps, applies and saves them. Run
    files name it by ``algorithm:``, matched case-insensitively (``static``, ``gmp``, ``set``,
    ``rigl`` are plugtrain-sparsity's).

    :param registry: call ``registry.register(name, "pkg.module:Class", schema=Args)`` for each
        algorithm.
    :returns: nothing; the return value is ignored.
    """


@hookspec
def plugtrain_register_sparsity_schedules(registry: ComponentRegistrar) -> None:
    """Declare sparsity schedule types (a ``{type: NAME, ...}`` schedule); called once per registry.

    A schedule type gives a sparsity algorithm's hyperparameter (``sparsity``,
    ``drop_fraction``) a value per step. Its target is a subclass of
    :class:`plugtrain.hyperparams.HyperParameterSchedule` that implements ``at(step)``; it is
    constructed with the mapping's other keys, checked against ``schema`` first. ``check`` builds
    schedules, so the target's module must not import torch. A run file writes the type by its
    name, matched case-insensitively; the built-in types (``constant``, ``linear``, ``exp``,
    ``power``, ``cosine``, ``cycling``) come first and cannot be replaced.

    :param registry: call ``registry.register(name, "pkg.module:Class", schema=Args)`` for each
        type; ``schema`` may be the class itself when it is an attrs class.
    :returns: nothing; the return value is ignored.
    """


# -------------------------------------------------------------------------------------------
# checkpoint converters


@hookspec
def plugtrain_register_checkpoint_converters(registry: ComponentRegistrar) -> None:
    """Declare checkpoint converters (Hugging Face <-> plugtrain); called once per registry.

    A converter's target is a :class:`plugtrain.conversion.CheckpointConverter`: a declaration
    (``config.json`` table, weight rules, per-tensor transforms) that the shared engine applies
    in both directions, one shard in memory at a time. ``plugtrain checkpoint convert --model
    KEY``, a ``ckpt_path`` naming a Hugging Face folder and ``list-converters`` find it by its
    key. The target's module must not import torch (listing imports it); transforms import torch
    when they run.

    :param registry: call ``registry.register(key, "pkg.module:CONVERTER",
        schema=plugtrain.conversion.ConverterArguments, aliases=[...])`` for each converter;
        use Model Zoo's converter key where one exists (``llama``, ``llama-headless``).
    :returns: nothing; the return value is ignored.
    """
