"""Running ``trainer.init.sparsity``: masks, hooks and checkpoints around any sparsity algorithm.

A :class:`plugtrain.protocols.SparsityAlgorithm` only decides masks. Everything else is here, the
same for built-in and third-party algorithms:

- which parameters each group sparsifies (:func:`select_parameters`: the first group whose filter
  matches a parameter wins, a parameter reached twice (tied weights) counts once, under the
  first name; without ``param_filter`` the default filter of Model Zoo);
- the masks: a persistent bool buffer ``<name>_mask`` on the parameter's owning module (so
  ``fc1.weight_mask`` in the model's state dict), all true until :meth:`Sparsity.initialize`
  builds the masks that a checkpoint did not bring;
- masking: the weights before every forward (training and evaluation), the gradients in
  backward (``where(mask, grad, 0)``, so NaN at pruned spots become 0), the optimizer state
  tensors shaped like a sparse parameter before and after each optimizer step, and weights and
  states again when a mask changes. Weights and states are multiplied by the mask (as in
  cstorch), skipped for a tensor not modified in place since it was last masked (its
  ``_version`` tells);
- after each training step :meth:`Sparsity.step_end` asks every algorithm whether this is an
  update step; a step whose update was not applied (the GradScaler skipped it, or
  ``nan_policy: skip_step``) still counts but never updates masks;
- randomness: one ``torch.Generator`` seeded with the trainer's seed (the same on every rank)
  and saved in checkpoints, so random initialisation and regrowth agree on every process and
  resume exactly; gradients an algorithm asks for are summed over the processes first.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import torch
from torch import nn

from plugtrain.errors import CheckpointMismatchError

__all__ = [
    "DEFAULT_DENSE_WORDS",
    "SparseParameter",
    "Sparsity",
    "SparsityGroup",
    "default_param_filter",
    "glob_filter",
    "group_from_spec",
    "select_parameters",
    "sparsity_groups",
]

log = logging.getLogger("plugtrain")

DEFAULT_DENSE_WORDS = ("embedding", "norm", "lm_head", "pe_helper")
"""Without ``param_filter``, a parameter whose lower-cased name holds one of these stays dense."""

NO_MASKS = (
    "Did not find any sparsity masks in the model checkpoint. Please ensure that you're using a "
    "checkpoint with the correct sparsity config from a previous run."
)

ParamFilter = Callable[[str, torch.Tensor], bool]


def default_param_filter(name: str, param: torch.Tensor) -> bool:
    """Model Zoo's default: more than one dimension, and no embedding, norm or LM head."""
    lowered = name.lower()
    return param.dim() > 1 and not any(word in lowered for word in DEFAULT_DENSE_WORDS)


def glob_filter(globs: str | Sequence[str]) -> ParamFilter:
    """A filter matching full parameter names against ``globs`` (``fnmatch``, whole name).

    ``*`` also matches dots and ``[qkv]`` classes work, as in cstorch.

    :raises TypeError: ``globs`` is not a string or a list of strings.
    """
    if isinstance(globs, str):
        globs = [globs]
    if not isinstance(globs, list | tuple) or not all(isinstance(g, str) for g in globs):
        message = f"filter must be a string or list of strings, got {type(globs).__name__}"
        raise TypeError(message)
    patterns = [re.compile(fnmatch.translate(glob)) for glob in globs]

    def matches(name: str, param: torch.Tensor) -> bool:
        return any(pattern.fullmatch(name) for pattern in patterns)

    return matches


def _as_filter(value: Any) -> ParamFilter:
    if value is None:
        return default_param_filter
    if callable(value):
        return value  # type: ignore[no-any-return]
    return glob_filter(value)


@attrs.define(eq=False)
class SparseParameter:
    """One sparsified parameter: its full name, owning module and local name."""

    name: str
    module: nn.Module
    local: str

    @property
    def param(self) -> torch.Tensor:
        """The parameter itself (looked up, so that moving the module is fine)."""
        return self.module._parameters[self.local]  # type: ignore[return-value]

    @property
    def mask_name(self) -> str:
        """The mask buffer's full name in the model's state dict: ``fc1.weight_mask``."""
        return self.name + "_mask"

    @property
    def mask(self) -> torch.Tensor:
        """The current mask (a bool tensor of the parameter's shape)."""
        return self.module._buffers[self.local + "_mask"]  # type: ignore[return-value]


@attrs.frozen
class SparsityGroup:
    """One entry of ``sparsity:``: which parameters, and how to build its algorithm.

    :param build: ``build(params)`` returns the algorithm for the group's ``(name, parameter)``
        pairs (a :class:`plugtrain.protocols.SparsityAlgorithm`).
    :param param_filter: globs, a callable ``(name, param) -> bool``, or ``None`` for the
        default filter.
    :param where: how messages name the group (``trainer.init.sparsity[1] (run.yaml:9:5)``).
    """

    build: Callable[[list[tuple[str, torch.Tensor]]], Any]
    param_filter: Any = None
    where: str = "sparsity"


def group_from_spec(registry: Any, spec: Any) -> SparsityGroup:
    """A group of a validated :class:`~plugtrain.config.plan.SparsityGroupSpec`.

    The algorithm is built through ``registry`` when the model's parameters are known; a
    constructor refusing its arguments (RigL's balance groups not dividing a weight) is a
    :class:`~plugtrain.errors.ConfigError` naming the group and where it was written.
    """
    from plugtrain.config.plan import ComponentSpec
    from plugtrain.errors import ConfigError, ConfigIssue
    from plugtrain.train.components import build_component

    component = ComponentSpec(
        "sparsity", spec.algorithm, spec.call_arguments(), spec.path, spec.location
    )

    def build(params: list[tuple[str, torch.Tensor]]) -> Any:
        try:
            return build_component(registry, "sparsity", component, params)
        except (ValueError, TypeError) as exc:
            if isinstance(exc, ConfigError):
                raise
            message = f"{spec.algorithm}: {exc}"
            raise ConfigError([ConfigIssue(spec.path, message, spec.location)]) from exc

    return SparsityGroup(build, spec.param_filter, spec.where)


def sparsity_groups(value: Any, registry: Any = None) -> list[SparsityGroup]:
    """The groups of ``Trainer(sparsity=...)``.

    :param value: ``None``; :class:`SparsityGroup` objects (or a list of them); validated
        :class:`~plugtrain.config.plan.SparsityGroupSpec` objects (from a run file's plan); or
        any form a run file takes (a level, a group mapping, a list of them), validated here
        with :func:`plugtrain.config.validation.validate.plan_sparsity`.
    :param registry: builds the algorithms; default: the process-wide registry.
    :raises ConfigError: for a value that does not validate, naming every problem.
    """
    from plugtrain.config.plan import SparsityGroupSpec
    from plugtrain.config.validation.validate import plan_sparsity
    from plugtrain.discovery.loading import get_registry

    if value is None:
        return []
    registry = registry if registry is not None else get_registry()
    entries = list(value) if isinstance(value, list | tuple) else [value]
    if all(isinstance(e, SparsityGroup | SparsityGroupSpec) for e in entries):
        return [
            e if isinstance(e, SparsityGroup) else group_from_spec(registry, e) for e in entries
        ]
    return [group_from_spec(registry, spec) for spec in plan_sparsity(registry, value)]


def select_parameters(
    model: nn.Module, filters: Sequence[ParamFilter]
) -> list[list[tuple[str, nn.Module, str]]]:
    """For each filter, the ``(full name, owning module, local name)`` of its parameters.

    Every submodule's own parameters are walked from ``model``; a parameter goes to the first
    filter that matches it; a parameter reached twice (tied weights) is taken once, under the
    first name found; modules and parameters with ``requires_dense = True`` stay dense.
    """
    chosen: list[list[tuple[str, nn.Module, str]]] = [[] for _ in filters]
    seen: set[int] = set()
    for prefix, module in model.named_modules(remove_duplicate=False):
        if getattr(module, "requires_dense", False):
            continue
        for local, param in module._parameters.items():
            if param is None or id(param) in seen or getattr(param, "requires_dense", False):
                continue
            seen.add(id(param))
            name = f"{prefix}.{local}" if prefix else local
            for index, matches in enumerate(filters):
                if matches(name, param):
                    chosen[index].append((name, module, local))
                    break
    return chosen


class _Group:
    """A built group: its algorithm and its parameters."""

    def __init__(self, algorithm: Any, params: list[SparseParameter], where: str) -> None:
        self.algorithm = algorithm
        self.params = params
        self.where = where
        self.wants_gradients = bool(getattr(algorithm, "needs_gradients", False))
        self.initialised: set[str] = set()


class Sparsity:
    """The sparsity of one Trainer's model: its groups, masks and hooks.

    :param groups: the groups in order (the first whose filter matches a parameter takes it).
    :param model: the unwrapped model (before the backend places or wraps it).
    :param seed: seeds the generator of random masks and regrowth (the same on every rank).
    """

    def __init__(self, groups: Sequence[SparsityGroup], model: nn.Module, seed: int = 0) -> None:
        self.model = model
        self.groups: list[_Group] = []
        self._optimizer: Any = None
        self._stepped = False
        self._gradients: dict[str, torch.Tensor] = {}
        self._seed = seed
        self._generator: torch.Generator | None = None
        self._generator_state: torch.Tensor | None = None
        # caches, each entry checked against the tensors' identity and in-place version
        self._factors: dict[tuple[str, torch.dtype], tuple[Any, int, torch.Tensor]] = {}
        self._clean: dict[int, tuple[Any, Any, tuple[int, int]]] = {}
        chosen = select_parameters(model, [_as_filter(g.param_filter) for g in groups])
        for group, found in zip(groups, chosen, strict=True):
            if not found:
                log.warning(
                    "%s: No parameters were sparsified in the module. This is likely due to the "
                    "parameter filter not matching any parameters in the module",
                    group.where,
                )
                continue
            params = [SparseParameter(name, module, local) for name, module, local in found]
            algorithm = group.build([(p.name, p.param) for p in params])
            self.groups.append(_Group(algorithm, params, group.where))
        for built in self.groups:
            for sparse in built.params:
                self._attach(sparse, built)
        model.register_forward_pre_hook(self._before_forward)

    # -- structure -------------------------------------------------------------------------------

    @property
    def parameters(self) -> list[SparseParameter]:
        """Every sparse parameter, group by group."""
        return [p for group in self.groups for p in group.params]

    @property
    def algorithms(self) -> list[Any]:
        """The algorithm of each group that sparsifies something, in order."""
        return [group.algorithm for group in self.groups]

    def masks(self) -> dict[str, torch.Tensor]:
        """Every mask by parameter name (the buffers themselves)."""
        return {p.name: p.mask for p in self.parameters}

    def _attach(self, sparse: SparseParameter, group: _Group) -> None:
        buffer = sparse.local + "_mask"
        if buffer in sparse.module._buffers:
            log.warning("Module %r has already been sparsified.", sparse.module)
        else:
            mask = torch.ones_like(sparse.param, dtype=torch.bool)
            sparse.module.register_buffer(buffer, mask, persistent=True)
        name = sparse.name
        keep_dense = group.wants_gradients

        def mask_gradient(grad: torch.Tensor) -> torch.Tensor:
            if keep_dense:
                saved = self._gradients.get(name)
                self._gradients[name] = grad.detach().clone() if saved is None else saved + grad
            return self._masked_gradient(grad, sparse)

        sparse.param.register_hook(mask_gradient)

    def attach_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Mask the optimizer state of sparse parameters before and after each of its steps.

        :raises RuntimeError: for a second optimizer.
        """
        if self._optimizer is not None and self._optimizer is not optimizer:
            message = (
                "Sparsifying multiple optimizers using the same sparsity algorithm is not "
                "supported."
            )
            raise RuntimeError(message)
        self._optimizer = optimizer
        optimizer.register_step_pre_hook(lambda *_: self._mask_optimizer_state())
        optimizer.register_step_post_hook(lambda *_: self._after_optimizer_step())

    # -- masking ---------------------------------------------------------------------------------

    def _factor(self, sparse: SparseParameter, dtype: torch.dtype) -> torch.Tensor:
        """The mask as 0/1 of ``dtype`` (multiplying is ~10x faster than ``masked_fill_``)."""
        mask = sparse.mask
        key = (sparse.name, dtype)
        cached = self._factors.get(key)
        if cached is None or cached[0]() is not mask or cached[1] != mask._version:
            cached = (weakref.ref(mask), mask._version, mask.to(dtype))
            self._factors[key] = cached
        return cached[2]

    def _masked_gradient(self, grad: torch.Tensor, sparse: SparseParameter) -> torch.Tensor:
        """``where(mask, grad, 0)``: NaN and infinities at pruned spots become 0.

        On the CPU, where ``where`` on a bool mask is several times slower than a product, a
        gradient whose sum is finite (so all of it is) is multiplied by the 0/1 mask instead.
        """
        if grad.device.type == "cpu" and bool(torch.isfinite(grad.sum())):
            return grad * self._factor(sparse, grad.dtype)
        zero = torch.zeros((), dtype=grad.dtype, device=grad.device)
        return torch.where(sparse.mask, grad, zero)

    def _zero_masked(self, tensor: torch.Tensor, sparse: SparseParameter) -> None:
        """Multiply ``tensor`` by the mask, unless it was not modified since that was done."""
        mask = sparse.mask
        seen = self._clean.get(id(tensor))
        if (
            seen is not None
            and seen[0]() is tensor
            and seen[1]() is mask
            and seen[2] == (tensor._version, mask._version)
        ):
            return
        tensor.mul_(self._factor(sparse, tensor.dtype))
        self._clean[id(tensor)] = (
            weakref.ref(tensor),
            weakref.ref(mask),
            (tensor._version, mask._version),
        )

    @torch.no_grad()
    def _before_forward(self, *_: Any) -> None:
        for sparse in self.parameters:
            self._zero_masked(sparse.param, sparse)

    @torch.no_grad()
    def _mask_optimizer_state(self, only: Iterable[SparseParameter] | None = None) -> None:
        if self._optimizer is None:
            return
        state = self._optimizer.state
        for sparse in self.parameters if only is None else only:
            param = sparse.param
            for value in state.get(param, {}).values():
                if (
                    isinstance(value, torch.Tensor)
                    and value.shape == param.shape
                    and not getattr(value, "requires_dense", False)
                ):
                    self._zero_masked(value, sparse)

    @torch.no_grad()
    def _apply(self, only: Iterable[SparseParameter] | None = None) -> None:
        chosen = list(self.parameters if only is None else only)
        for sparse in chosen:
            self._zero_masked(sparse.param, sparse)
        self._mask_optimizer_state(chosen)

    def _after_optimizer_step(self) -> None:
        self._apply()
        self._stepped = True

    @torch.no_grad()
    def _write(self, group: _Group, masks: Mapping[str, torch.Tensor], what: str) -> None:
        """Copy an algorithm's masks into the buffers and apply them."""
        written = []
        for sparse in group.params:
            if sparse.name not in masks:
                continue
            mask = masks[sparse.name]
            current = sparse.mask
            if not isinstance(mask, torch.Tensor) or mask.shape != current.shape:
                shape = getattr(mask, "shape", type(mask).__name__)
                message = (
                    f"{group.where}: {type(group.algorithm).__name__}.{what} returned a mask of "
                    f"shape {shape} for {sparse.name}, whose shape is {tuple(current.shape)}"
                )
                raise ValueError(message)
            current.copy_(mask.to(device=current.device, dtype=torch.bool))
            written.append(sparse)
        self._apply(written)

    # -- run start and steps ---------------------------------------------------------------------

    @property
    def generator(self) -> torch.Generator:
        """The generator handed to the algorithms (on the parameters' device)."""
        if self._generator is None:
            device = self.parameters[0].param.device if self.parameters else torch.device("cpu")
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self._seed)
            if self._generator_state is not None:
                self._generator.set_state(self._generator_state)
        return self._generator

    def initialize(self) -> None:
        """Build the masks that no checkpoint brought (``init_method``), once; then apply all.

        Called at the start of ``fit``, ``validate`` and ``validate_all``, after a checkpoint
        was restored, so that ``topk`` sees loaded weights.
        """
        for group in self.groups:
            missing = [p for p in group.params if p.name not in group.initialised]
            if missing:
                masks = group.algorithm.initial_masks(self.generator)
                wanted = {p.name for p in missing}
                chosen = {k: v for k, v in masks.items() if k in wanted}
                absent = sorted(wanted - set(masks))
                if absent:
                    message = (
                        f"{group.where}: {type(group.algorithm).__name__}.initial_masks "
                        f"returned no mask for {', '.join(absent)}"
                    )
                    raise ValueError(message)
                self._write(group, chosen, "initial_masks")
                group.initialised.update(wanted)
        self._apply()

    def step_start(self) -> None:
        """Forget the gradients saved for the algorithms in the previous step."""
        self._gradients.clear()
        self._stepped = False

    def saved_gradients(self) -> list[torch.Tensor]:
        """The unmasked gradients saved for the algorithms in this step (to scale in place)."""
        return list(self._gradients.values())

    def step_end(self) -> None:
        """After a training step: count it in every algorithm, update masks where due."""
        stepped, self._stepped = self._stepped, False
        for group in self.groups:
            if not group.algorithm.advance(stepped):
                continue
            gradients = self._summed_gradients(group) if group.wants_gradients else None
            masks = {p.name: p.mask.clone() for p in group.params}
            new = group.algorithm.update_masks(masks, gradients, self.generator)
            self._write(group, new, "update_masks")
        self._gradients.clear()

    def _summed_gradients(self, group: _Group) -> dict[str, torch.Tensor]:
        """The unmasked gradients of a group's parameters, summed over the processes."""
        found: dict[str, torch.Tensor] = {}
        for sparse in group.params:
            grad = self._gradients.get(sparse.name)
            found[sparse.name] = torch.zeros_like(sparse.param) if grad is None else grad
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            for grad in found.values():
                torch.distributed.all_reduce(grad)
        return found

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> list[Any]:
        """The checkpoint's ``sparsity``: each group's algorithm state, in order."""
        return [group.algorithm.state_dict() for group in self.groups]

    def generator_state(self) -> torch.Tensor:
        """The random generator's state (checkpoint key ``sparsity_rng``)."""
        return self.generator.get_state()

    def check_checkpoint(
        self, path: str | os.PathLike[str], parts: Mapping[str, Any], strict: bool
    ) -> None:
        """Refuse a checkpoint without masks (strict loading) or with another number of groups.

        :raises CheckpointMismatchError: naming ``path``; nothing was changed.
        """
        model = parts.get("model")
        if strict and isinstance(model, Mapping) and self.parameters:
            keys = set(model)
            if not any(k.endswith("_mask") and k[: -len("_mask")] in keys for k in keys):
                raise CheckpointMismatchError(f"{path}: {NO_MASKS}")
        saved = parts.get("sparsity")
        if saved is not None:
            states = [saved] if isinstance(saved, Mapping) else list(saved)
            if len(states) != len(self.groups):
                message = (
                    f"{path}: sparsity: Expected a list of {len(self.groups)} state_dicts for "
                    f"the Group sparsity algorithm but got {len(states)}."
                )
                raise CheckpointMismatchError(message)

    def load_checkpoint(self, parts: Mapping[str, Any], rng: torch.Tensor | None) -> None:
        """Take the masks a restored model brought, and the algorithms' state when saved."""
        model = parts.get("model")
        if isinstance(model, Mapping):
            for group in self.groups:
                group.initialised.update(p.name for p in group.params if p.mask_name in model)
        saved = parts.get("sparsity")
        if saved is None:
            log.info("Sparsity state not found in the checkpoint. Using default initialized state.")
        else:
            states = [saved] if isinstance(saved, Mapping) else list(saved)
            for group, state in zip(self.groups, states, strict=True):
                group.algorithm.load_state_dict(state)
            log.info("Sparsity state found in checkpoint and loaded successfully.")
        if rng is not None:
            self._generator_state = rng
            if self._generator is not None:
                self._generator.set_state(rng)
