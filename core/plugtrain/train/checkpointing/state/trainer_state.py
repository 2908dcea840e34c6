"""A Trainer's state: what a checkpoint holds, how it is saved and how it is loaded back.

The parts (weights, optimizer, schedulers, grad scaler, step, RNG, data position, callbacks,
sparsity) are composed here; where they are written is the :class:`Checkpointer`'s business.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from plugtrain._unset import UNSET
from plugtrain._version import __version__
from plugtrain.config.plan import plain
from plugtrain.conversion.meta_build import adopt, covers, fill_pending
from plugtrain.errors import CheckpointError, CheckpointMismatchError, TrainingError
from plugtrain.train.checkpointing.ranks import restore_agreed
from plugtrain.train.checkpointing.run_folder import reserve
from plugtrain.train.checkpointing.state.fit_check import check_fits
from plugtrain.train.checkpointing.state.fit_start import STARTED_FROM, restore_for_fit
from plugtrain.train.checkpointing.state.foreign import (
    hf_checkpoint_state,
    is_hf_checkpoint,
    with_model_prefix,
)
from plugtrain.train.checkpointing.state.optimizer_state import check_optimizer_state
from plugtrain.train.checkpointing.state.owner import StateOwner
from plugtrain.train.checkpointing.state.parts import checkpoint_parts
from plugtrain.train.checkpointing.state.state_rule import RULE, plain_problems
from plugtrain.train.components import evaluation_mode
from plugtrain.train.data import DataStream, rng_state, set_rng_state
from plugtrain.train.distributed import gathered, model_shards, optimizer_shards

if TYPE_CHECKING:
    from packaging.version import Version


__all__ = ["StateOwner", "TrainerState", "check_version"]

log = logging.getLogger("plugtrain")


class TrainerState:
    """Saves and restores one :class:`~plugtrain.train.trainer.Trainer`.

    :param trainer: whose components are saved and restored (what it reads of the trainer:
        :class:`~.owner.StateOwner`).
    """

    def __init__(self, trainer: StateOwner) -> None:
        self.trainer = trainer
        self.verified = False
        self.started_from: str | None = None
        """The resolved starting point of this run (``None``: the model's own weights)."""
        self.loaded_metadata: dict[str, Any] = {}
        """The ``metadata`` of the checkpoint loaded last."""
        self._owned: set[str] = set()  # the names of the tensors read last into memory of their own

    @property
    def gathers(self) -> bool:
        """Whether the state is gathered from shards (FSDP2 into a single-file checkpoint).

        Gathering is a collective: then every process composes the state, the writer writes.
        """
        trainer = self.trainer
        sharded = bool(trainer.strategy.sharded_parameters)
        return sharded and not trainer.checkpointer.sharded

    def state_dict(self) -> dict[str, Any]:
        """All it takes to continue exactly (see ``Trainer.state_dict``).

        Under FSDP2 the model and optimizer parts are full tensors (every process must call
        this then) unless the checkpointer stores shards (``Checkpointer.sharded``).
        """
        trainer = self.trainer
        sparsity: dict[str, Any] = {}
        if trainer.sparsity is not None:
            sparsity["sparsity"] = trainer.sparsity.state_dict()
            sparsity["sparsity_rng"] = trainer.sparsity.generator_state()
        optimizer = trainer.optimizer
        model_state = trainer.unwrapped_model.state_dict()
        optimizer_state = optimizer.state_dict() if optimizer is not None else None
        if self.gathers:
            keep = bool(trainer.strategy.is_writer)
            model_state = gathered(model_state, keep)
            optimizer_state = gathered(optimizer_state, keep)
        return {
            **sparsity,
            "model": model_state,
            "optimizer": optimizer_state,
            "schedulers": [s.state_dict() for s in trainer.schedulers],
            "grad_scaler": trainer.precision.state_dict(),
            "global_step": trainer.global_step,
            "rng": rng_state(),
            "data": trainer.stream_position,
            "callbacks": trainer.callbacks_dispatch.state_dict(),
            "metadata": {
                "plugtrain": __version__,
                "torch": str(torch.__version__),
                "optimizer": type(optimizer).__name__ if optimizer is not None else None,
                "config": plain(trainer.config) if trainer.config is not None else None,
                STARTED_FROM: self.started_from,
            },
        }

    def save(self, stream: DataStream | None = None) -> Path | None:
        """Write the checkpoint of the current step (by the writing process only).

        Every process: ``optimizer.eval()`` (:mod:`plugtrain.train.components.optimizer_mode`), the
        callbacks' ``on_before_save_checkpoint``, the save, ``on_save_checkpoint`` (the writing
        process), ``on_after_save_checkpoint`` (reverse order), ``optimizer.train()``.
        """
        trainer = self.trainer
        if stream is not None:
            trainer.stream_position = stream.position()
        with evaluation_mode(trainer.optimizer):
            trainer.callbacks_dispatch.on_before_save_checkpoint(trainer, trainer.global_step)
            path = self._write()
            if path is not None:
                trainer.callbacks_dispatch.on_save_checkpoint(trainer, path)
            trainer.callbacks_dispatch.on_after_save_checkpoint(trainer, trainer.global_step)
        return path

    def _write(self) -> Path | None:
        """Check the weights and write them (the writing process); the file written, if any."""
        trainer = self.trainer
        trainer.nan_guard.check_weights_before_save()
        path = None
        checkpointer = trainer.checkpointer
        writer = trainer.strategy.is_writer
        left_out: list[tuple[str, str]] = []
        state = self.state_dict() if writer or self.gathers or checkpointer.collective else None
        if state is not None and (writer or checkpointer.collective):
            owners = self._owners()
            state, left_out = _plain_state(trainer, state, owners)
            path = checkpointer.save(trainer.global_step, state)
            if not self.verified:  # the exact rule, once: the file loads with weights_only=True
                checkpointer.verify(path, state, owners)
                self.verified = True
        trainer.saved_step = trainer.global_step
        trainer.last_good_checkpoint = checkpointer.path(trainer.global_step)
        if not writer:
            path = None  # every process saved its shard; the writer reports the checkpoint
        if left_out:
            described = "; ".join(f"{where} ({problem})" for where, problem in left_out)
            message = (
                f"{path}: saved without the state of {described}, which would not load with "
                f"weights_only=True; training stopped (a resumed fit starts that callback "
                f"fresh). {RULE[0].upper()}{RULE[1:]}."
            )
            raise CheckpointError(message)
        return path

    def _owners(self) -> dict[str, Any]:
        """The object behind each part of the state, named in errors."""
        trainer = self.trainer
        owners: dict[str, Any] = {
            "model": trainer.unwrapped_model,
            "optimizer": trainer.optimizer,
            "callbacks": trainer.callbacks_dispatch.callbacks,
            "schedulers": trainer.schedulers,
        }
        if trainer.sparsity is not None:
            owners["sparsity"] = trainer.sparsity.algorithms
        return owners

    def _read(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The checkpoint at ``path``: plugtrain's, or a Hugging Face one converted.

        Its ``metadata`` is kept as :attr:`loaded_metadata`.
        """
        model = self.trainer.unwrapped_model
        self._owned = set()
        if is_hf_checkpoint(path):
            registry = self.trainer.registry
            if registry is None:  # a Trainer built in Python: the process's plugins
                from plugtrain.discovery.loading import get_registry

                registry = get_registry()
            name = _model_name(self.trainer.config)
            state = hf_checkpoint_state(model, path, registry, name, self._owned)
        else:
            state = self.trainer.checkpointer.load(path)
        if "model" in state:
            state["model"] = with_model_prefix(model, state["model"])
        self.loaded_metadata = _metadata(state)
        return state

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore a checkpoint (see ``Trainer.load_checkpoint``)."""
        trainer = self.trainer
        state = self._read(path)
        # a weights-only checkpoint (what convert writes) starts at step 0 with a fresh optimizer
        trainer.loaded_step = int(state.get("global_step", 0))
        check_version(path, state, trainer.checkpoint.strict_version)
        parts = checkpoint_parts(state)
        _fill_what_it_lacks(trainer.unwrapped_model, parts.get("model"))
        # callbacks see every part (a LoRA adapter-only checkpoint's base reference is one)
        trainer.callbacks_dispatch.on_before_load_checkpoint(trainer, parts)
        if trainer.optimizer is None:  # evaluation only: the weights (and masks) and the step
            parts = {k: v for k, v in parts.items() if k in _EVALUATION_PARTS}
        kept = {**parts, "metadata": state.get("metadata")}
        strict = not trainer.checkpoint.disable_strict_checkpoint_loading
        if trainer.sparsity is not None:
            trainer.sparsity.check_checkpoint(path, parts, strict)
        model = trainer.unwrapped_model
        same_keys = "model" not in parts or set(parts["model"]) == set(model.state_dict())
        optimizer = trainer.optimizer if strict or same_keys else None
        check_fits(path, kept, model, optimizer, trainer.schedulers, strict=strict)
        sharded = bool(trainer.strategy.sharded_parameters)
        if not sharded:  # a sharded state is checked by its first step
            check_optimizer_state(path, parts.get("optimizer"), optimizer)
        if "model" in parts:
            weights = model_shards(model, parts["model"]) if sharded else parts["model"]
            self._load_weights(path, weights, strict, same_keys)
        fill_pending(model)  # built for loading, but this checkpoint held no weights
        if trainer.sparsity is not None:
            trainer.sparsity.load_checkpoint(parts, state.get("sparsity_rng"))
        if optimizer is not None and parts.get("optimizer") is not None:
            stored = parts["optimizer"]
            try:
                optimizer.load_state_dict(
                    optimizer_shards(optimizer, stored) if sharded else stored
                )
            except (ValueError, KeyError, TypeError, RuntimeError) as exc:
                message = f"{path}: does not fit this run: optimizer: {exc}"
                raise CheckpointMismatchError(message) from exc
        if "schedulers" in parts:
            saved = parts["schedulers"] or []
            for scheduler, scheduler_state in zip(trainer.schedulers, saved, strict=True):
                scheduler.load_state_dict(scheduler_state)
        if "grad_scaler" in parts:
            trainer.precision.load_state_dict(parts["grad_scaler"])
        if "global_step" in parts:
            trainer.global_step = int(parts["global_step"])
            if state.get("rng") is not None:
                set_rng_state(state["rng"])
        if "dataloader" in parts:
            trainer.stream_position = parts["dataloader"]
        if "callbacks" in parts:
            trainer.callbacks_dispatch.load_state_dict(parts["callbacks"], path)
        trainer.last_good_checkpoint = Path(path)
        log.info("resumed from %s at step %d", path, trainer.global_step)
        trainer.callbacks_dispatch.on_load_checkpoint(trainer, Path(path))

    def _load_weights(
        self, path: Any, weights: Mapping[str, Any], strict: bool, same_keys: bool
    ) -> None:
        """Load the model's part; fill what it lacks of a model built for loading."""
        trainer = self.trainer
        model = trainer.unwrapped_model
        if self._owned:  # converted into memory of their own: a model built for it keeps them
            adopt(model, {n: v for n, v in weights.items() if n in self._owned})
        loaded = model.load_state_dict(weights, strict=strict)
        if not same_keys:
            _report_non_strict(path, loaded.missing_keys, loaded.unexpected_keys, trainer.optimizer)
        fill_pending(model, set(weights).difference(loaded.unexpected_keys))

    def restore(self, ckpt_path: Any) -> Path | None:
        """Load ``ckpt_path``, or (unset, autoloading) the newest sound checkpoint; the path."""
        try:
            return self._restore(ckpt_path)
        finally:  # a model built for a checkpoint that did not load: its initial values
            fill_pending(self.trainer.unwrapped_model)

    def _restore(self, ckpt_path: Any) -> Path | None:
        trainer = self.trainer
        if ckpt_path is not UNSET:
            if ckpt_path is not None:
                trainer.load_checkpoint(ckpt_path)
            return None if ckpt_path is None else Path(ckpt_path)
        if not trainer.checkpoint.autoload_last_checkpoint:
            return None
        if int(getattr(trainer.strategy, "world_size", 1)) > 1:
            return restore_agreed(
                trainer,
                lambda: trainer.checkpointer.load_newest(trainer.load_checkpoint),
                trainer.load_checkpoint,
            )
        found: Path | None = trainer.checkpointer.load_newest(trainer.load_checkpoint)
        return found

    def restore_for_fit(self, ckpt_path: Any) -> Path | None:
        """Load what a fit starts from: its run's newest checkpoint or its starting point.

        See :mod:`.fit_start` for the rule; the path loaded.
        """
        try:
            return restore_for_fit(self, ckpt_path)
        finally:  # a model built for a checkpoint that did not load: its initial values
            fill_pending(self.trainer.unwrapped_model)

    def check_room(self) -> None:
        """Fail before training when ``model_dir`` cannot hold a checkpoint (read-only, full)."""
        trainer = self.trainer
        needed = self._checkpoint_bytes() if trainer.strategy.is_writer else 0
        directory = trainer.checkpoint_dir
        probe = directory / f".write-test-{os.getpid()}"
        try:
            trainer.model_dir.mkdir(parents=True, exist_ok=True)
            directory.mkdir(parents=True, exist_ok=True)
            with probe.open("wb") as handle:
                handle.write(b"ok")
                handle.flush()
                reserve(handle.fileno(), needed, trainer.model_dir)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                message = (
                    f"model_dir {trainer.model_dir} has no room for a checkpoint "
                    f"(about {needed / 2**20:.1f} MiB): {exc.strerror or exc}"
                )
            else:
                message = f"model_dir {trainer.model_dir} cannot be written: {exc.strerror or exc}"
            raise TrainingError(message) from exc
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()

    def _checkpoint_bytes(self) -> int:
        """The size of the weights and optimizer state: a lower bound of a checkpoint's."""
        trainer = self.trainer
        tensors = list(trainer.unwrapped_model.state_dict().values())
        if trainer.optimizer is not None:
            for state in trainer.optimizer.state.values():
                tensors.extend(v for v in state.values() if isinstance(v, torch.Tensor))
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _fill_what_it_lacks(model: torch.nn.Module, weights: Any) -> None:
    """Give what a checkpoint lacks of a model built for loading its initial values.

    Before the callbacks see the checkpoint: they may read the model's own weights for what it
    lacks (LoRA's adapter-only checkpoint of a base that was the model as built).
    """
    if isinstance(weights, Mapping) and not covers(model, weights):
        fill_pending(model, weights)


def _metadata(state: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's ``metadata`` mapping (empty when it has none)."""
    metadata = state.get("metadata")
    return dict(metadata) if isinstance(metadata, Mapping) else {}


def _model_name(config: Mapping[str, Any] | None) -> str | None:
    """The model's registered name in a run file's ``init`` mapping (``None``: not given)."""
    model = (config or {}).get("model")
    name = model.get("name") if isinstance(model, Mapping) else None
    return name if isinstance(name, str) else None


_EVALUATION_PARTS = frozenset({"model", "sparsity", "global_step"})
"""What a trainer without an optimizer (``validate`` only) loads from a checkpoint."""


def _plain_state(
    trainer: StateOwner, state: dict[str, Any], owners: Mapping[str, Any]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``state`` with unloadable callback states left out, and what was left out.

    Every save checks (cheaply, :func:`.state_rule.plain_problems`) that the
    state loads back with ``weights_only=True``. A callback's state that would not is left out
    so that the step's work is saved (the caller then stops, naming it); any other part stops
    the save, since no run could resume from the checkpoint.

    :raises CheckpointError: a part other than a callback's state would not load.
    """
    problems = plain_problems(state, owners)
    fatal = [(w, p) for w, p in problems if not w.startswith("callbacks[")]
    if fatal:
        described = "; ".join(f"{where} ({problem})" for where, problem in fatal)
        newest = trainer.last_good_checkpoint
        message = (
            f"the checkpoint of step {trainer.global_step} was not written: {described} would "
            "not load with weights_only=True, so no run could resume from it; training stopped; "
            f"the newest checkpoint is {newest}. {RULE[0].upper()}{RULE[1:]}."
        )
        raise CheckpointError(message)
    if problems:
        callbacks = list(state["callbacks"])
        for where, _problem in problems:
            callbacks[int(where[len("callbacks[") : -1])] = None
        state = {**state, "callbacks": callbacks}
    return state, problems


def _version_of(text: str) -> Version | None:
    """``text`` as a PEP 440 version (``1.0rc1``, ``0.2.0.dev3``), or ``None``."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def check_version(path: Any, state: Mapping[str, Any], strict: bool) -> None:
    """Refuse a checkpoint of another plugtrain major.minor version (``strict_version``).

    With ``strict_version: false`` it is a warning (Model Zoo's rule for its own version). A
    checkpoint without a version, or written by a pre-release (``0.2.0rc1``, ``0.2.0.dev3``)
    of the same major.minor, loads with a warning saying so.
    """
    written = str((state.get("metadata") or {}).get("plugtrain") or "")
    if not written:
        log.warning(
            "%s: no plugtrain version recorded (written by hand or by another program); "
            "loading it as if written by plugtrain %s",
            path,
            __version__,
        )
        return
    theirs, ours = _version_of(written), _version_of(__version__)
    if theirs is None or ours is None:
        log.warning("%s: written by plugtrain %r, not a version; loading it anyway", path, written)
        return
    if theirs.release[:2] == ours.release[:2]:
        if written != __version__ and theirs.is_prerelease != ours.is_prerelease:
            log.warning(
                "%s: written by plugtrain %s, this is plugtrain %s (a pre-release and a release "
                "of the same version); loading it",
                path,
                written,
                __version__,
            )
        return
    message = (
        f"{path}: written by plugtrain {written}, this is plugtrain {__version__} "
        f"({'a pre-release of ' if theirs.is_prerelease else ''}another major.minor version)"
    )
    if strict:
        raise CheckpointMismatchError(
            message + "; set trainer.init.checkpoint.strict_version: false to load it anyway"
        )
    log.warning("%s; loading it anyway (strict_version: false)", message)


def _report_non_strict(
    path: Any, missing: Sequence[str], unexpected: Sequence[str], optimizer: Any
) -> None:
    """Log what a non-strict load left out (``disable_strict_checkpoint_loading``)."""
    parts = []
    if missing:
        parts.append("missing from the checkpoint (kept as initialised): " + ", ".join(missing))
    if unexpected:
        parts.append("in the checkpoint but not in the model (ignored): " + ", ".join(unexpected))
    if optimizer is not None:
        parts.append("the optimizer state was not loaded (the parameters differ)")
    log.warning("%s: loaded non-strictly; %s", path, "; ".join(parts))
