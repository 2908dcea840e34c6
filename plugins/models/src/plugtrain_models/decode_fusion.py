"""Stock ``nn.Linear`` layers that read one input, as one matrix product (the decode step's).

At one token per row a decode step's products are matrix-vector products: each reads its
weight once, and each also pays a call, an allocation and, with several threads, a parallel
region. The query, key and value projections of a layer read the same input, and so do a
GLU's two projections: :func:`fused_linear_step` computes such a group as one ``mm`` over
their weights stacked along the output dimension, outputs side by side.

A group may also take the weight of the RMSNorm in front of it (``scale``, times a constant
``gain``): ``(x * w) @ W^T`` is ``x @ (diag(w) W^T)``, so the stacked weight's rows are scaled
once and the step's norm skips its last multiplication.

The stacked weight is a copy. It is kept, per group, for as long as the group's first module
lives, so repeated generation calls reuse it; it is rebuilt when any weight or bias of the
group, or the scale, has changed since (another tensor object or storage, or an in-place
write: its version counter moved).
The memory cost is the group's own weight bytes again (for a Llama layer, the query, key,
value, gate and up projections: about 70 % of the layer's weights), so only groups of at most
:data:`MAX_STACKED_BYTES` are stacked: that is where a product's call costs are a share of the
time it spends reading its weight worth the copy. A larger group's products are dominated by
the read, so stacking would gain next to nothing there and hold a copy of most of the model.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["MAX_STACKED_BYTES", "StackedProduct", "fused_linear_step"]

MAX_STACKED_BYTES = 16 * 2**20
"""The largest group (its weights' and biases' bytes together) that is stacked."""

Signature = tuple[tuple[float, ...], ...]
Kept = tuple[Signature, list["weakref.ref[torch.Tensor]"], "StackedProduct"]

_KEPT: weakref.WeakKeyDictionary[nn.Module, Kept] = weakref.WeakKeyDictionary()


def _tensors(modules: Sequence[nn.Linear], scale: torch.Tensor | None) -> list[torch.Tensor]:
    tensors = [t for m in modules for t in (m.weight, m.bias) if t is not None]
    return tensors if scale is None else [*tensors, scale]


def _still(
    kept: Kept, modules: Sequence[nn.Linear], scale: torch.Tensor | None, gain: float
) -> bool:
    """Whether ``kept`` was stacked from the current tensors, unchanged since (and ``scale``)."""
    signature, refs, _ = kept
    current = _tensors(modules, scale)
    if len(refs) != len(current):
        return False
    if any(ref() is not tensor for ref, tensor in zip(refs, current, strict=True)):
        return False
    return signature == _signature(modules, scale, gain)


def _signature(modules: Sequence[nn.Linear], scale: torch.Tensor | None, gain: float) -> Signature:
    """What identifies the group's current weights: each tensor's module, address and version."""
    parts: list[tuple[float, ...]] = []
    for module in modules:
        for tensor in (module.weight, module.bias):
            if tensor is not None:
                parts.append((id(module), tensor.data_ptr(), tensor._version, tensor.numel()))
    if scale is not None:
        parts.append((gain, scale.data_ptr(), scale._version, scale.numel()))
    return tuple(parts)


class StackedProduct:
    """A group's product: ``[B, in]`` to ``[B, sum of out]``, over the stacked weight.

    Called as ``product(hidden)``, or ``product(hidden, out)`` to write a preallocated
    ``[B, sum of out]`` tensor (no allocation per call; views of ``out`` stay valid).
    """

    def __init__(self, weight_t: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight_t, self.bias = weight_t, bias

    def __call__(self, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The modules' outputs side by side, in ``out`` when given."""
        if self.bias is None:
            return torch.mm(hidden, self.weight_t, out=out)
        return torch.addmm(self.bias, hidden, self.weight_t, out=out)


def _stacked(
    modules: Sequence[nn.Linear], scale: torch.Tensor | None, gain: float
) -> StackedProduct:
    with torch.inference_mode(False), torch.no_grad():  # plain tensors, usable in any mode
        weight_t = torch.cat([m.weight.detach() for m in modules]).t().contiguous()
        if scale is not None:
            weight_t.mul_(scale.detach().unsqueeze(1) * gain)
        if modules[0].bias is None:  # nn.Linear(bias=False) holds None
            return StackedProduct(weight_t, None)  # type: ignore[unreachable]
        return StackedProduct(weight_t, torch.cat([m.bias.detach() for m in modules]))


def fused_linear_step(
    modules: Sequence[nn.Module], scale: torch.Tensor | None = None, gain: float = 1.0
) -> StackedProduct | None:
    """``modules`` on one ``[B, in]`` input as one ``mm``: ``[B, sum of out]``, in order.

    ``None`` unless every module is a stock ``nn.Linear`` and they share the input width, the
    dtype, the device and whether they have a bias, or where the group holds more than
    :data:`MAX_STACKED_BYTES`. The stacked weight is stored transposed,
    ``[in, sum of out]`` row-major: at one row per token the BLAS streams it 5-10 % faster than
    an ``[out, in]`` weight read through its transpose, and sums each dot product in another
    order (float32 rounding apart, each output column is the module's own).

    :param scale: ``[in]``, multiplies the input first (an RMSNorm's weight): the product is
        ``modules``' outputs for ``x * scale * gain``; ``None`` (also returned) unless it has
        the weights' dtype and device.
    """
    if not modules or any(type(m) is not nn.Linear for m in modules):
        return None
    linears: list[nn.Linear] = list(modules)  # type: ignore[arg-type]
    first = linears[0].weight
    for module in linears:
        same = module.weight.shape[1] == first.shape[1] and module.weight.dtype == first.dtype
        if not same or module.weight.device != first.device:
            return None
        if (module.bias is None) != (linears[0].bias is None):
            return None
    if scale is not None:
        alike = scale.dtype == first.dtype and scale.device == first.device
        if not alike or scale.shape != (first.shape[1],):
            return None
    weights = [t for m in linears for t in (m.weight, m.bias) if t is not None]
    if sum(t.numel() * t.element_size() for t in weights) > MAX_STACKED_BYTES:
        return None
    kept = _KEPT.get(linears[0])
    if kept is not None and _still(kept, linears, scale, gain):
        return kept[2]
    step = _stacked(linears, scale, gain)
    refs = [weakref.ref(tensor) for tensor in _tensors(linears, scale)]
    _KEPT[linears[0]] = (_signature(linears, scale, gain), refs, step)
    return step
