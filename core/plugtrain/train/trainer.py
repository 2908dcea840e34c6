"""The Trainer: the Model Zoo ``Trainer`` surface, running for real on the registered backends.

``Trainer(device=... | backend=..., model_dir, model, optimizer, schedulers, loop, checkpoint,
logging, precision, sparsity, callbacks, loggers, seed)``, then ``.fit(train_dataloader,
val_dataloader, ckpt_path)`` or ``.validate(val_dataloader, ckpt_path)``. ``model`` may be a
module or a callable building one; ``optimizer`` an optimizer or a callable taking the model;
each scheduler an instance or a callable taking the optimizer.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from plugtrain.backend_base import check_backend, claim_backend_type
from plugtrain.config.precision import PrecisionSettings
from plugtrain.config.sections import (
    MUTUALLY_EXCLUSIVE,
    CheckpointSettings,
    LoggingSettings,
    LoopSettings,
)
from plugtrain.errors import ConfigError, ConfigIssue, TrainingError
from plugtrain.scheduler import scheduler_groups, scheduler_key
from plugtrain.schema import validated_arguments
from plugtrain.train import checkpoint as ckpt
from plugtrain.train.backends import backend as make_backend
from plugtrain.train.batches import MetricSums, Scored, move_batch, score_batch
from plugtrain.train.callbacks import Callbacks
from plugtrain.train.checkpoint_fit import check_fits, first_non_finite
from plugtrain.train.checkpoint_parts import checkpoint_parts
from plugtrain.train.disk import reserve
from plugtrain.train.interrupt import InterruptRequest, TrainingInterrupted, signal_name
from plugtrain.train.lock import ModelDirLock
from plugtrain.train.loggers import DEFAULT_LOGGERS, Loggers, assemble
from plugtrain.train.precision import Precision
from plugtrain.train.resume import DataStream, rng_state, seed_everything, set_rng_state
from plugtrain.train.sparsity import Sparsity, sparsity_groups
from plugtrain.train.state_check import verify_first_checkpoint

__all__ = ["Trainer", "TrainingError", "TrainingInterrupted"]

log = logging.getLogger("plugtrain")

UNSET: Any = object()
"""``ckpt_path`` left unset: resume from the newest checkpoint when autoloading is on."""

DEFAULT_LOG_STEPS = 50


def _settings(cls: type, value: Any, owner: str) -> Any:
    if value is None or isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        message = f"{owner} must be a mapping or {cls.__name__}, got {type(value).__name__}"
        raise ConfigError([ConfigIssue(owner, message)])
    return cls(**validated_arguments(cls, value, owner=owner))


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _check_scheduler_overlap(schedulers: Sequence[Any]) -> None:
    """Reject two schedulers of the same kind (LR or WD) that target one param group.

    Kind and groups are read through the scheduler protocol (:mod:`plugtrain.scheduler`).
    """
    owner: dict[tuple[str, int], int] = {}
    for index, scheduler in enumerate(schedulers):
        for group in scheduler_groups(scheduler):
            key = (scheduler_key(scheduler), group)
            if key in owner:
                message = (
                    f"schedulers {owner[key]} ({type(schedulers[owner[key]]).__name__}) and "
                    f"{index} ({type(scheduler).__name__}) both set '{key[0]}' of param group "
                    f"{group}; give them disjoint param_group_tags"
                )
                raise ConfigError([ConfigIssue("schedulers", message)])
            owner[key] = index


def default_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy for class labels, mean squared error otherwise."""
    if targets.dtype in (torch.int64, torch.int32) and outputs.dim() == targets.dim() + 1:
        return nn.functional.cross_entropy(outputs, targets)
    return nn.functional.mse_loss(outputs, targets)


class Trainer:
    """Trains and evaluates one model on one backend (Model Zoo's ``Trainer``).

    :param device: ``"CPU"``, ``"GPU"`` or ``"CSX"``: that backend with default settings.
    :param backend: a backend object (``plugtrain.backend(...)``), its type name, or a mapping
        ``{backend_type: ..., ...}``. Exclusive with ``device``. Neither: ``CPU``.
    :param model_dir: where checkpoints and metrics go.
    :param model: an ``nn.Module`` or a callable returning one (called after seeding).
    :param optimizer: an optimizer, or a callable taking the model and returning one.
    :param schedulers: one or a list of schedulers, or callables taking the optimizer.
    :param loop: :class:`LoopSettings` or its mapping.
    :param checkpoint: :class:`CheckpointSettings` or its mapping.
    :param logging: :class:`LoggingSettings` or its mapping.
    :param precision: :class:`PrecisionSettings` or its mapping (Model Zoo's ``precision``:
        autocast, loss scaling, gradient clipping; see :mod:`plugtrain.train.precision`).
    :param sparsity: weight sparsity (Model Zoo's ``sparsity``): a level (one ``static``
        group), a group mapping ``{algorithm: ..., sparsity: ..., ...}``, a list of them, or
        :class:`plugtrain.train.sparsity.SparsityGroup` objects; see
        :mod:`plugtrain.train.sparsity`.
    :param callbacks: objects with any of the methods of :class:`plugtrain.protocols.Callback`,
        or ``{Name: {arguments}}`` of registered callbacks; called in list order.
    :param loggers: :class:`plugtrain.protocols.Logger` objects or ``{Name: {arguments}}``, in
        addition to the defaults ``ProgressLogger`` and ``MetricsFilesLogger``; ``{Name: None}``
        removes a default, and an object of a default's class replaces it.
    :param seed: seeds Python, numpy and torch before the model is built.
    :param loss_fn: ``loss_fn(outputs, targets)`` for models that return outputs rather than
        their loss (:mod:`plugtrain.train.batches`); default cross-entropy for class labels.
    :param config: the resolved run configuration, stored in checkpoints' metadata.
    """

    def __init__(
        self,
        *,
        device: str | None = None,
        backend: Any = None,
        model_dir: str | os.PathLike[str] = "./model_dir",
        model: nn.Module | Callable[[], nn.Module],
        optimizer: Any = None,
        schedulers: Any = None,
        loop: LoopSettings | Mapping[str, Any] | None = None,
        checkpoint: CheckpointSettings | Mapping[str, Any] | None = None,
        logging: LoggingSettings | Mapping[str, Any] | None = None,
        precision: PrecisionSettings | Mapping[str, Any] | None = None,
        sparsity: Any = None,
        callbacks: Sequence[Any] | None = None,
        loggers: Sequence[Any] | None = None,
        seed: int | None = None,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if device is not None and backend is not None:
            raise ValueError(MUTUALLY_EXCLUSIVE)
        self.backend = self._make_backend(device, backend)
        self.backend.check_runnable()
        self.model_dir = Path(model_dir)
        self.loop: LoopSettings | None = _settings(LoopSettings, loop, "loop")
        self.checkpoint: CheckpointSettings = (
            _settings(CheckpointSettings, checkpoint, "checkpoint") or CheckpointSettings()
        )
        self.logging: LoggingSettings = _settings(
            LoggingSettings, logging, "logging"
        ) or LoggingSettings(log_steps=DEFAULT_LOG_STEPS)
        _say_inert_off_csx(self.backend.backend_type, self.logging)
        self.callbacks: list[Any] = assemble("callback", callbacks, {})
        self.loggers: list[Any] = assemble(
            "logger", loggers, DEFAULT_LOGGERS, ("log_metrics", "close")
        )
        main = self.is_main_process  # loggers (and their callback methods) run there only
        self._loggers = Loggers(self.loggers if main else [])
        self._callbacks = Callbacks(self.callbacks + (self.loggers if main else []))
        self.target_step: int | None = None
        """The step the current (or last) ``fit`` ends at; ``None`` before any fit."""
        self.seed = seed
        self.loss_fn = loss_fn or default_loss
        self.config = config
        if seed is not None:
            seed_everything(seed)
        self.device: torch.device = self.backend.device
        settings = _settings(PrecisionSettings, precision, "precision")
        if settings is not None and hasattr(self.backend, "configure_precision"):
            self.backend.configure_precision(settings)
        self.precision = Precision(settings, self.device, on_csx=self.backend.backend_type == "CSX")
        self._move_batches = self.device.type != "cpu"
        built = model if isinstance(model, nn.Module) else model()
        groups = sparsity_groups(sparsity)
        self.sparsity: Sparsity | None = Sparsity(groups, built, seed=seed or 0) if groups else None
        """The model's weight sparsity (masks and algorithms); ``None`` without."""
        self.model: nn.Module = self.backend.prepare_model(built)
        self.optimizer = self._make_optimizer(optimizer)
        if self.sparsity is not None and self.optimizer is not None:
            self.sparsity.attach_optimizer(self.optimizer)
        self.schedulers = [
            s if hasattr(s, "step") else s(self.optimizer) for s in _as_list(schedulers)
        ]
        _check_scheduler_overlap(self.schedulers)
        self.global_step = 0
        self.loaded_step: int | None = None
        """The global step stored in the checkpoint loaded last (``None``: none loaded)."""
        self._stream_position: dict[str, Any] | None = None
        self._saved_step = -1
        self._state_verified = False
        self._stream: DataStream | None = None
        self._last_good: Path | None = None  # the newest checkpoint known to be sound
        self._skipped_in_a_row = 0

    # -- construction --------------------------------------------------------------------------

    @staticmethod
    def _make_backend(device: str | None, backend: Any) -> Any:
        """The backend object, checked against the Backend protocol."""
        if backend is None:
            backend = make_backend(device or "CPU")
        elif isinstance(backend, str):
            backend = make_backend(backend)
        elif isinstance(backend, Mapping):
            arguments = dict(backend)
            backend_type = arguments.pop("backend_type", None)
            if not isinstance(backend_type, str):
                message = "a backend mapping needs backend_type (CPU, GPU or CSX)"
                raise ConfigError([ConfigIssue("backend", message)])
            backend = make_backend(backend_type, **arguments)
        check_backend(backend)
        claim_backend_type(backend.backend_type)
        return backend

    def _make_optimizer(self, optimizer: Any) -> Any:
        if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
            return optimizer
        if callable(optimizer):
            return optimizer(self._unwrapped_model)
        message = f"optimizer must be an optimizer or a callable, got {type(optimizer).__name__}"
        raise ConfigError([ConfigIssue("optimizer", message)])

    @property
    def _unwrapped_model(self) -> nn.Module:
        return getattr(self.model, "module", self.model)

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes checkpoints and metrics (rank 0)."""
        return bool(self.backend.is_main_process)

    @property
    def samples_seen(self) -> int:
        """Training examples this process drew in the current (or last) ``fit``.

        A batch counts the length of its first tensor's first dimension (the inputs of a pair,
        a mapping's first tensor value); a batch without a tensor counts 1.
        """
        return self._stream.samples if self._stream is not None else 0

    # -- steps ---------------------------------------------------------------------------------

    def _to_device(self, value: Any) -> Any:
        return move_batch(value, self.device)

    def _forward(self, batch: Any, model: nn.Module | None = None) -> Scored:
        """Loss, count and metrics of one batch (the contract of :mod:`plugtrain.train.batches`)."""
        batch = self._to_device(batch) if self._move_batches else batch
        keywords = bool(getattr(self._unwrapped_model, "batch_as_kwargs", False))
        model = model or self.model
        return score_batch(model, batch, self.loss_fn, self.precision.autocast, keywords)

    def _train_step(self, stream: DataStream) -> tuple[float, int, int, MetricSums]:
        self._callbacks.on_train_step_start(self, self.global_step + 1)
        accum = self.loop.grad_accum_steps if self.loop else 1
        self.optimizer.zero_grad(set_to_none=True)
        if self.sparsity is not None:
            self.sparsity.step_start()
        total_loss = 0.0
        correct = count = 0
        extra = MetricSums()
        for _ in range(accum):
            scored = self._forward(stream.next())
            loss = scored.loss
            self.precision.backward(loss if accum == 1 else loss / accum)
            total_loss += float(loss.detach()) / accum
            correct += scored.correct
            count += scored.count
            extra.add(scored.metrics, scored.weight)
        if math.isfinite(total_loss):
            problem = self.precision.step(self.optimizer, self._before_optimizer_step)
        else:
            problem = f"the loss is {total_loss}"
        if problem is None:
            self._skipped_in_a_row = 0
        elif self.loop is not None and self.loop.nan_policy == "skip_step":
            self.optimizer.zero_grad(set_to_none=True)
            log.warning(
                "step %d: %s; its update was skipped (nan_policy: skip_step)",
                self.global_step + 1,
                problem,
            )
            self._skipped_in_a_row += 1
            self._check_skipping("gradients were" if math.isfinite(total_loss) else "loss was")
        else:
            self._stop_non_finite(problem)
        if self.sparsity is not None:
            self.sparsity.step_end()  # masks change only if the optimizer applied the step
        for scheduler in self.schedulers:
            scheduler.step()
        self.global_step += 1
        return total_loss, correct, count, extra

    def _before_optimizer_step(self) -> None:
        self._callbacks.on_before_optimizer_step(self, self.optimizer)

    def _kept(self) -> str:
        if self._last_good is None:
            return "; no checkpoint of this fit was saved"
        return f"; the last good checkpoint is {self._last_good}"

    def _stop_non_finite(self, problem: str) -> None:
        message = (
            f"{problem} at step {self.global_step + 1}; training stopped{self._kept()} "
            "(loop.nan_policy: skip_step drops such steps instead)"
        )
        raise TrainingError(message)

    def _non_finite_weight(self) -> str | None:
        parameters = dict(self._unwrapped_model.named_parameters())
        return first_non_finite(parameters, parameters)

    def _check_skipping(self, what: str = "loss was") -> None:
        """Under ``skip_step``, stop when skipping cannot help: weights gone, or too many skips."""
        assert self.loop is not None
        step = self.global_step + 1
        bad = self._non_finite_weight()
        if bad is not None:
            message = (
                f"the weights are not finite at step {step} (NaN or infinity in {bad}): "
                f"skipping steps cannot recover them; training stopped{self._kept()}"
            )
            raise TrainingError(message)
        limit = self.loop.max_consecutive_skips
        if self._skipped_in_a_row >= limit:
            message = (
                f"the {what} not finite for {limit} steps in a row (steps {step - limit + 1} "
                f"to {step}, nan_policy: skip_step); training stopped{self._kept()} "
                "(loop.max_consecutive_skips sets how many)"
            )
            raise TrainingError(message)

    def group_values(self) -> dict[str, float]:
        """Learning rate and weight decay of every param group, for metrics."""
        values: dict[str, float] = {}
        for index, group in enumerate(self.optimizer.param_groups):
            label = _group_label(group, index)
            values[f"lr/{label}"] = float(group["lr"])
            if "weight_decay" in group:
                values[f"weight_decay/{label}"] = float(group["weight_decay"])
        return values

    # -- evaluation ----------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(
        self, dataloader: Iterable[Any], max_batches: int | None = None
    ) -> dict[str, float]:
        """Mean loss over the examples of ``dataloader``, and its other metrics.

        Accuracy for class labels the Trainer scored, the model's own metrics (weighted by each
        batch's count), and ``perplexity`` for a model with ``report_perplexity``.
        """
        # This process's share of the first max_batches batches.
        dataloader = self.backend.prepare_eval_dataloader(dataloader, max_batches)
        was_training = self.model.training
        self.model.eval()
        loss_sum = 0.0
        correct = count = examples = 0
        extra = MetricSums()
        for batch in dataloader:
            # The unwrapped model: ranks may see different numbers of evaluation batches, and
            # a DDP forward could wait on the others.
            scored = self._forward(batch, self._unwrapped_model)
            loss_sum += float(scored.loss) * scored.weight
            examples += scored.weight
            correct += scored.correct
            count += scored.count
            extra.add(scored.metrics, scored.weight)
        self.model.train(was_training)
        totals = {"loss_sum": loss_sum, "examples": examples, "correct": correct, "count": count}
        totals = self.backend.reduce_sums({**totals, **extra.totals()})
        if not totals["examples"]:
            message = "the evaluation data (val_dataloader) is empty: it yields no example"
            raise TrainingError(message)
        metrics = {"loss": totals["loss_sum"] / max(totals["examples"], 1)}
        if totals["count"]:
            metrics["accuracy"] = totals["correct"] / totals["count"]
        if getattr(self._unwrapped_model, "report_perplexity", False):
            metrics["perplexity"] = math.exp(min(metrics["loss"], 700.0))
        metrics.update(MetricSums.means(totals))
        return metrics

    def _run_eval(
        self, dataloader: Iterable[Any], max_batches: int | None, split: str = "val"
    ) -> dict[str, float]:
        self._callbacks.on_validate_start(self)
        metrics = self.evaluate(dataloader, max_batches)
        self._callbacks.on_validate_end(self, metrics)
        self._loggers.log_metrics(self.global_step, split, metrics)
        return metrics

    # -- checkpoints ---------------------------------------------------------------------------

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints are written and found: ``checkpoint_root``, else ``model_dir``."""
        root = self.checkpoint.checkpoint_root
        return Path(root) if root is not None else self.model_dir

    def checkpoint_path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is written."""
        return self.checkpoint_dir / self.checkpoint.checkpoint_name.format(step=step)

    def state_dict(self) -> dict[str, Any]:
        """All it takes to continue exactly: weights, optimizer, schedulers, scaler, RNG, data."""
        from plugtrain import __version__

        sparsity: dict[str, Any] = {}
        if self.sparsity is not None:
            sparsity["sparsity"] = self.sparsity.state_dict()
            sparsity["sparsity_rng"] = self.sparsity.generator_state()
        return {
            **sparsity,
            "model": self._unwrapped_model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "schedulers": [s.state_dict() for s in self.schedulers],
            "grad_scaler": self.precision.state_dict(),
            "global_step": self.global_step,
            "rng": rng_state(),
            "data": self._stream_position,
            "callbacks": self._callbacks.state_dict(),
            "metadata": {
                "plugtrain": __version__,
                "torch": str(torch.__version__),
                "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None,
                "config": ckpt.plain(self.config) if self.config is not None else None,
            },
        }

    def save_checkpoint(self, stream: DataStream | None = None) -> Path | None:
        """Write the checkpoint of the current step (on the main process only)."""
        if stream is not None:
            self._stream_position = stream.position()
        bad = self._non_finite_weight()
        if bad is not None:  # every process holds the same weights, so all of them stop here
            message = (
                f"the weights are not finite at step {self.global_step} (NaN or infinity in "
                f"{bad}); no checkpoint written; training stopped{self._kept()}"
            )
            raise TrainingError(message)
        path = None
        if self.is_main_process:
            state = self.state_dict()
            path = ckpt.save_checkpoint(self.checkpoint_path(self.global_step), state)
            if not self._state_verified:  # every state must load with weights_only=True
                owners = {"model": self._unwrapped_model, "optimizer": self.optimizer}
                owners["callbacks"] = self._callbacks.callbacks
                if self.sparsity is not None:
                    owners["sparsity"] = self.sparsity.algorithms
                verify_first_checkpoint(path, state, {**owners, "schedulers": self.schedulers})
                self._state_verified = True
        self._saved_step = self.global_step
        self._last_good = self.checkpoint_path(self.global_step)
        if path is not None:
            self._callbacks.on_save_checkpoint(self, path)
        return path

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore a checkpoint: weights, optimizer, schedulers, grad scaler, step, RNG, data.

        Callback state too. Callbacks' ``on_before_load_checkpoint`` may delete parts (see
        :mod:`plugtrain.train.checkpoint_parts`) to keep them as they are; the RNG is restored
        with ``global_step``.

        :raises CorruptCheckpointError: the file is damaged or holds non-finite weights.
        :raises CheckpointMismatchError: it does not fit this trainer (nothing was changed).
        """
        state = ckpt.load_checkpoint(path)
        self.loaded_step = int(state["global_step"])
        _check_version(path, state, self.checkpoint.strict_version)
        parts = checkpoint_parts(state)
        self._callbacks.on_before_load_checkpoint(self, parts)
        kept = {**parts, "metadata": state.get("metadata")}
        strict = not self.checkpoint.disable_strict_checkpoint_loading
        if self.sparsity is not None:
            self.sparsity.check_checkpoint(path, parts, strict)
        model = self._unwrapped_model
        same_keys = "model" not in parts or set(parts["model"]) == set(model.state_dict())
        optimizer = self.optimizer if strict or same_keys else None
        check_fits(path, kept, model, optimizer, self.schedulers, strict=strict)
        if "model" in parts:
            loaded = model.load_state_dict(parts["model"], strict=strict)
            if not same_keys:
                _report_non_strict(
                    path, loaded.missing_keys, loaded.unexpected_keys, self.optimizer
                )
        if self.sparsity is not None:
            self.sparsity.load_checkpoint(parts, state.get("sparsity_rng"))
        if optimizer is not None and parts.get("optimizer") is not None:
            try:
                optimizer.load_state_dict(parts["optimizer"])
            except (ValueError, KeyError, TypeError, RuntimeError) as exc:
                message = f"{path}: does not fit this run: optimizer: {exc}"
                raise ckpt.CheckpointMismatchError(message) from exc
        if "schedulers" in parts:
            saved = parts["schedulers"] or []
            for scheduler, scheduler_state in zip(self.schedulers, saved, strict=True):
                scheduler.load_state_dict(scheduler_state)
        if "grad_scaler" in parts:
            self.precision.load_state_dict(parts["grad_scaler"])
        if "global_step" in parts:
            self.global_step = int(parts["global_step"])
            if state.get("rng") is not None:
                set_rng_state(state["rng"])
        if "dataloader" in parts:
            self._stream_position = parts["dataloader"]
        if "callbacks" in parts:
            self._callbacks.load_state_dict(parts["callbacks"], path)
        self._last_good = Path(path)
        log.info("resumed from %s at step %d", path, self.global_step)
        self._callbacks.on_load_checkpoint(self, Path(path))

    def _restore(self, ckpt_path: Any) -> Path | None:
        """Load ``ckpt_path``, or (unset, autoloading) the newest sound checkpoint; the path."""
        if ckpt_path is not UNSET:
            if ckpt_path is not None:
                self.load_checkpoint(ckpt_path)
            return None if ckpt_path is None else Path(ckpt_path)
        if not self.checkpoint.autoload_last_checkpoint:
            return None
        found = ckpt.find_checkpoints(self.checkpoint_dir, self.checkpoint.checkpoint_name)
        for index, (_, path) in enumerate(found):
            try:
                self.load_checkpoint(path)
            except ckpt.CorruptCheckpointError as exc:
                older = found[index + 1][1].name if index + 1 < len(found) else None
                instead = f"trying the older {older}" if older else "no older checkpoint to try"
                log.warning("skipping a bad checkpoint: %s; %s", exc, instead)
                continue
            return path
        return None

    def _check_model_dir(self) -> None:
        """Fail before training when ``model_dir`` cannot hold a checkpoint (read-only, full)."""
        needed = self._checkpoint_bytes() if self.is_main_process else 0
        probe = self.checkpoint_dir / f".write-test-{os.getpid()}"
        try:
            self.model_dir.mkdir(parents=True, exist_ok=True)
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            with probe.open("wb") as handle:
                handle.write(b"ok")
                handle.flush()
                reserve(handle.fileno(), needed, self.model_dir)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                message = (
                    f"model_dir {self.model_dir} has no room for a checkpoint "
                    f"(about {needed / 2**20:.1f} MiB): {exc.strerror or exc}"
                )
            else:
                message = f"model_dir {self.model_dir} cannot be written: {exc.strerror or exc}"
            raise TrainingError(message) from exc
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()

    def _checkpoint_bytes(self) -> int:
        """The size of the weights and optimizer state: a lower bound of a checkpoint's."""
        tensors = list(self._unwrapped_model.state_dict().values())
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                tensors.extend(v for v in state.values() if isinstance(v, torch.Tensor))
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))

    # -- the loops -----------------------------------------------------------------------------

    def _target_step(self, train_dataloader: Any) -> int:
        loop = self.loop
        if loop is None:
            message = "fit needs loop settings with max_steps, num_steps or num_epochs"
            raise ConfigError([ConfigIssue("loop", message)])
        limits = []
        if loop.max_steps is not None:
            limits.append(loop.max_steps)
        if loop.num_steps is not None:
            limits.append(self.global_step + loop.num_steps)
        if loop.num_epochs is not None:
            per_epoch = self._steps_per_epoch(train_dataloader)
            if per_epoch is None:
                message = "num_epochs needs a data loader with a length; use num_steps"
                raise ConfigError([ConfigIssue("loop.num_epochs", message)]) from None
            limits.append(self.global_step + loop.num_epochs * per_epoch)
        if not limits:
            message = "give at least one of max_steps, num_steps or num_epochs"
            raise ConfigError([ConfigIssue("loop", message)])
        return min(limits)

    def _steps_per_epoch(self, train_dataloader: Any) -> int | None:
        """Optimizer steps in one epoch: ``loop.steps_per_epoch``, else one pass of the data.

        :raises ConfigError: ``steps_per_epoch`` needs more batches than one pass holds.
        """
        assert self.loop is not None
        accum = self.loop.grad_accum_steps
        try:
            length: int | None = len(train_dataloader)
        except TypeError:
            length = None
        wanted = self.loop.steps_per_epoch
        if wanted is None:
            return None if length is None else max(length // accum, 1)
        if length is not None and wanted * accum > length:
            message = (
                f"steps_per_epoch {wanted} needs {wanted * accum} batches per epoch, but the "
                f"training data loader yields {length}"
            )
            raise ConfigError([ConfigIssue("loop.steps_per_epoch", message)])
        return wanted

    def fit(
        self,
        train_dataloader: Iterable[Any],
        val_dataloader: Iterable[Any] | None = None,
        ckpt_path: str | os.PathLike[str] | None = UNSET,
    ) -> dict[str, float]:
        """Train until the loop's limit; returns the last validation metrics (or ``{}``).

        The main process holds ``model_dir``'s lock throughout (one fit per directory).

        :param ckpt_path: a checkpoint to start from; ``None``: none; unset: the newest sound
            checkpoint in ``model_dir`` when ``autoload_last_checkpoint`` (a damaged newer one
            is skipped with a warning).
        """
        if self.optimizer is None:
            message = "fit needs an optimizer"
            raise ConfigError([ConfigIssue("optimizer", message)])
        self._check_model_dir()
        if _is_empty(val_dataloader):
            message = "the evaluation data (val_dataloader) is empty: it yields no example"
            raise TrainingError(message)
        lock = ModelDirLock(self.model_dir) if self.is_main_process else contextlib.nullcontext()
        with lock:
            return self._fit(train_dataloader, val_dataloader, ckpt_path)

    def _fit(
        self, train_dataloader: Iterable[Any], val_dataloader: Iterable[Any] | None, ckpt_path: Any
    ) -> dict[str, float]:
        if self.is_main_process:
            for stale in ckpt.remove_stale_temporaries(
                self.checkpoint_dir, self.checkpoint.checkpoint_name
            ):
                log.info("removed %s, left by an interrupted save", stale)
        self._restore(ckpt_path)
        if self.sparsity is not None:
            self.sparsity.initialize()
        train_dataloader = self.backend.prepare_dataloader(train_dataloader)
        target = self._target_step(train_dataloader)
        assert self.loop is not None
        self.target_step = target
        epoch_steps = self.loop.steps_per_epoch and self._steps_per_epoch(train_dataloader)
        batches = epoch_steps * self.loop.grad_accum_steps if epoch_steps else None
        stream = self._stream = DataStream(
            train_dataloader, self._stream_position, batches_per_epoch=batches
        )
        last_val: dict[str, float] = {}
        try:
            self._callbacks.on_fit_start(self)
            if self.checkpoint.save_initial_checkpoint and self.global_step == 0:
                self.save_checkpoint(stream)
            with InterruptRequest() as interrupt:
                last_val = self._loop(stream, val_dataloader, target, interrupt)
            self._callbacks.on_fit_end(self)
        finally:
            self._loggers.close()
        return last_val

    def _loop(
        self,
        stream: DataStream,
        val_dataloader: Iterable[Any] | None,
        target: int,
        interrupt: InterruptRequest | None = None,
    ) -> dict[str, float]:
        assert self.loop is not None
        log_steps = self.logging.log_steps
        # A fractional eval_frequency counts from this fit's first step, an int from step 0.
        fraction = isinstance(self.loop.eval_frequency, float)
        start = self.global_step if fraction else 0
        eval_every = _eval_period(self.loop.eval_frequency, target - self.global_step)
        save_every = self.checkpoint.steps or 0
        window_loss, window_correct, window_count, window_steps = 0.0, 0, 0, 0
        window_skipped = 0
        window_extra = MetricSums()
        window_start = time.perf_counter()
        last_val: dict[str, float] = {}
        self.model.train()
        while self.global_step < target:
            loss, correct, count, extra = self._train_step(stream)
            window_skipped += not math.isfinite(loss)  # skipped under nan_policy: skip_step
            window_loss += loss if math.isfinite(loss) else 0.0
            window_correct += correct
            window_count += count
            if math.isfinite(loss):
                window_extra.merge(extra)
            window_steps += 1
            step = self.global_step
            values = None
            if step % log_steps == 0 or step == target:
                elapsed = time.perf_counter() - window_start
                sums = {"loss": window_loss, "finite": window_steps - window_skipped}
                sums.update(correct=window_correct, count=window_count)
                values = self._window_means(sums, window_extra)
                if window_skipped:
                    values["skipped_steps"] = window_skipped
                values["steps_per_second"] = window_steps / elapsed if elapsed > 0 else 0.0
                values.update(self.group_values())
                values.update(self.precision.metrics())
                self._callbacks.on_train_step_end(self, values)
                self._loggers.log_metrics(step, "train", values)
                window_loss, window_correct, window_count, window_steps = 0.0, 0, 0, 0
                window_skipped = 0
                window_extra = MetricSums()
                window_start = time.perf_counter()
            if val_dataloader is not None and eval_every and (step - start) % eval_every == 0:
                last_val = self._run_eval(val_dataloader, self.loop.eval_steps)
            if save_every and step % save_every == 0 and step != target:
                self.save_checkpoint(stream)
            if interrupt is not None and interrupt.agreed():
                self._stop_interrupted(stream, interrupt)
        if val_dataloader is not None and not (
            eval_every and (target - start) % eval_every == 0 and last_val
        ):
            last_val = self._run_eval(val_dataloader, self.loop.eval_steps)
        self.save_checkpoint(stream)
        if interrupt is not None and interrupt.agreed(final=True):
            self._stop_interrupted(stream, interrupt)
        return last_val

    def _window_means(self, sums: dict[str, Any], extra: MetricSums) -> dict[str, float]:
        """Loss, accuracy and extra metrics of a logging window, over every process.

        Every process logs at the same steps, so the sums are reduced there (a copy on one).
        """
        sums = self.backend.reduce_sums({**sums, **extra.totals()})
        finite = sums["finite"]
        values = {"loss": sums["loss"] / finite if finite else math.nan}
        if sums["count"]:
            values["accuracy"] = sums["correct"] / sums["count"]
        values.update(MetricSums.means(sums))
        return values

    def _stop_interrupted(self, stream: DataStream, interrupt: InterruptRequest) -> None:
        """Save the current step (unless just saved) and raise :class:`TrainingInterrupted`."""
        if self._saved_step != self.global_step:
            self.save_checkpoint(stream)
        path = self.checkpoint_path(self.global_step)
        number = interrupt.signal_number or 2
        how = "interrupted" if number == 2 else f"interrupted by {signal_name(number)}"
        message = (
            f"{how} at step {self.global_step}; checkpoint saved to {path}; "
            "run the same command again to resume"
        )
        raise TrainingInterrupted(message, number)

    def validate(
        self,
        val_dataloader: Iterable[Any],
        ckpt_path: str | os.PathLike[str] | None = UNSET,
    ) -> dict[str, float]:
        """Evaluate on ``val_dataloader`` (after loading a checkpoint) and return the metrics.

        :param ckpt_path: the checkpoint to evaluate; ``None``: the model as it is (untrained
            unless this trainer has fitted); unset: the newest sound checkpoint in
            ``model_dir``, and an error when there is none and this trainer has not fitted.
        """
        loaded = self._restore(ckpt_path)
        if ckpt_path is UNSET and loaded is None and self._last_good is None:
            name = self.checkpoint.checkpoint_name
            where = "" if self.checkpoint_dir.is_dir() else "; the folder does not exist"
            message = (
                f"{self.checkpoint_dir}: no checkpoint to validate (no sound file named {name}"
                f"{where}); give ckpt_path a checkpoint, or ckpt_path: null to evaluate the "
                "untrained model"
            )
            raise ckpt.CheckpointError(message)
        if self.sparsity is not None:
            self.sparsity.initialize()
        try:
            eval_steps = self.loop.eval_steps if self.loop else None
            metrics = self._run_eval(val_dataloader, eval_steps)
        finally:
            self._loggers.close()
        log.info("validation at step %d: %s", self.global_step, _describe(metrics))
        return metrics

    def validate_all(
        self,
        val_dataloaders: Iterable[Any] | Mapping[str, Iterable[Any]],
        ckpt_paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = UNSET,
    ) -> list[dict[str, Any]]:
        """Evaluate every checkpoint on every data loader (Model Zoo's ``validate_all``).

        :param val_dataloaders: one data loader, a list of them, or ``{name: loader}``.
        :param ckpt_paths: a path, a glob (``model_dir/checkpoint_*.mdl``) or a list of them;
            unset: every checkpoint in the checkpoint folder, in step order; ``None``: the model
            as it is.
        :returns: one record per checkpoint and data loader, in that order:
            ``{"checkpoint": path or None, "step": ..., "dataloader": name, **metrics}``.
        :raises CheckpointError: a checkpoint that cannot be loaded (naming it), or none found.
        """
        loaders = _named_loaders(val_dataloaders)
        paths = self._validate_all_paths(ckpt_paths)
        records: list[dict[str, Any]] = []
        try:
            eval_steps = self.loop.eval_steps if self.loop else None
            for path in paths:
                if path is not None:
                    self._load_for_validation(path)
                if self.sparsity is not None:
                    self.sparsity.initialize()
                for name, loader in loaders:
                    # the metrics files tell checkpoints apart by step, loaders by split
                    metrics = self._run_eval(loader, eval_steps, f"validate_all/{name}")
                    where = path if path is not None else "the model as it is"
                    log.info(
                        "validation of %s on %s at step %d: %s",
                        where,
                        name,
                        self.global_step,
                        _describe(metrics),
                    )
                    record: dict[str, Any] = {
                        "checkpoint": None if path is None else str(path),
                        "step": self.global_step,
                        "dataloader": name,
                    }
                    records.append({**record, **metrics})
        finally:
            self._loggers.close()
        return records

    def _validate_all_paths(self, ckpt_paths: Any) -> list[Path | None]:
        """The checkpoints ``validate_all`` evaluates, in order; globs expanded."""
        if ckpt_paths is None:
            return [None]
        if ckpt_paths is UNSET:
            found = ckpt.find_checkpoints(self.checkpoint_dir, self.checkpoint.checkpoint_name)
            if not found:
                message = (
                    f"{self.checkpoint_dir}: no checkpoint to validate (no file named "
                    f"{self.checkpoint.checkpoint_name}); give validate_all ckpt_paths"
                )
                raise ckpt.CheckpointError(message)
            return [path for _, path in reversed(found)]
        written = [ckpt_paths] if isinstance(ckpt_paths, str | os.PathLike) else list(ckpt_paths)
        paths: list[Path | None] = []
        for item in written:
            text = os.fspath(item)
            if glob.has_magic(text):
                matches = sorted(glob.glob(text), key=self._step_order)
                if not matches:
                    raise ckpt.CheckpointError(f"ckpt_paths: {text!r} matches no file")
                paths.extend(Path(m) for m in matches)
            elif not Path(text).is_file():
                raise ckpt.CheckpointError(f"{text}: no such checkpoint file (ckpt_paths)")
            else:
                paths.append(Path(text))
        return paths

    def _step_order(self, path: str) -> tuple[int, str]:
        """Checkpoints of this run's file name by step, other files after them by name."""
        step = ckpt.checkpoint_step(Path(path).name, self.checkpoint.checkpoint_name)
        return (2**63 if step is None else step, path)

    def _load_for_validation(self, path: Path) -> None:
        """Load one checkpoint of ``validate_all``; any failure names the file."""
        try:
            self.load_checkpoint(path)
            # Records and metrics carry the checkpoint's step even when a callback
            # (LoadCheckpointStates) kept the global step from being restored.
            self.global_step = self.loaded_step or 0
        except ckpt.CheckpointError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            message = f"{path}: cannot be loaded for validate_all: {type(exc).__name__}: {exc}"
            raise ckpt.CheckpointError(message) from exc


def _named_loaders(value: Any) -> list[tuple[str, Any]]:
    """``(name, loader)`` pairs: a mapping's names, else each loader's position."""
    if isinstance(value, Mapping):
        return [(str(name), loader) for name, loader in value.items()]
    if isinstance(value, list | tuple):
        return [(str(index), loader) for index, loader in enumerate(value)]
    return [("0", value)]


def _is_empty(loader: Iterable[Any] | None) -> bool:
    """Whether ``loader`` is known to yield nothing (it has a length of 0)."""
    try:
        return loader is not None and len(loader) == 0  # type: ignore[arg-type]
    except TypeError:
        return False


def _describe(metrics: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def _group_label(group: Mapping[str, Any], index: int) -> str:
    tags = group.get("tags")
    if tags:
        names = [tags] if isinstance(tags, str) else sorted(map(str, tags))
        return f"{index}:{'+'.join(names)}"
    return str(index)


def _eval_period(frequency: int | float | None, total_steps: int) -> int:
    """Steps between evaluations (0: only at the end), Model Zoo's rule.

    An int is a number of steps; a float in (0, 1] is that fraction of the fit's steps, rounded
    up (0.25 of 100 steps: every 25).
    """
    if not frequency:
        return 0
    if isinstance(frequency, float):
        return max(math.ceil(frequency * total_steps), 1)
    return int(frequency)


_SAID: set[str] = set()


def _say_once(key: str, message: str) -> None:
    if key not in _SAID:
        _SAID.add(key)
        log.info(message)


def _say_inert_off_csx(backend_type: str, settings: LoggingSettings) -> None:
    """Say once which logging settings only the CSX backend acts on."""
    if backend_type == "CSX":
        return
    if settings.wsc_log_level:
        _say_once(
            "wsc_log_level",
            f"logging.wsc_log_level has no effect on {backend_type}: it sets the log levels "
            "of Wafer-Scale Cluster servers, which only a CSX run has",
        )
    if settings.enable_act_frequency:
        _say_once(
            "enable_act_frequency",
            f"logging.enable_act_frequency has no effect on {backend_type}: it spaces "
            "activation transfers from a CS system, which only a CSX run has",
        )


def _version_of(text: str) -> tuple[int, int] | None:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _check_version(path: Any, state: Mapping[str, Any], strict: bool) -> None:
    """Refuse a checkpoint of another plugtrain major.minor version (``strict_version``).

    With ``strict_version: false`` it is a warning (Model Zoo's rule for its own version).
    """
    from plugtrain import __version__

    written = str((state.get("metadata") or {}).get("plugtrain") or "")
    theirs, ours = _version_of(written), _version_of(__version__)
    if theirs is None or ours is None or theirs == ours:
        return
    message = (
        f"{path}: written by plugtrain {written}, this is plugtrain {__version__} "
        "(another major.minor version)"
    )
    if strict:
        raise ckpt.CheckpointMismatchError(
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
