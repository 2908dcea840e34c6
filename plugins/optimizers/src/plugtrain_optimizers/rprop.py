"""Rprop: torch's update rule with cstorch's defaults."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import RpropArgs

__all__ = ["Rprop"]


class Rprop(PlugtrainOptimizer):
    """Resilient backpropagation (torch's rule).

    Per element, ``s = sign(g * g_prev)``: the step size is multiplied by ``etaplus`` (s > 0),
    ``etaminus`` (s < 0) or 1 and clamped to ``step_sizes``; where s < 0 the gradient counts as
    0; ``p -= sign(g) * step_size``. Step sizes start at the group's lr at construction.
    """

    kernels_match_torch_path = True

    schema = RpropArgs
    name = "Rprop"
    flat_by_default = True  # measured: pays even with the gradient copy
    native_kernels = True

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter, zero previous gradient, step sizes at lr."""
        state["step"] = self.new_step()
        state["prev"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        lr = as_float(group["lr"])
        state["step_size"] = torch.full_like(param, lr, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Rprop step over ``params``, in cache blocks, with arithmetic instead of masks.

        With ``s = sign(g * prev)`` in {-1, 0, 1} and ``etaminus <= 1 <= etaplus``, the factor is
        ``clamp(1 + a s, etaminus, etaplus)`` for ``a = max(etaplus - 1, 1 - etaminus)``: exactly
        etaplus, 1 or etaminus. The kept gradient is ``g * clamp(s + 1, 0, 1)`` (0 where s < 0).
        """
        etaminus, etaplus = (as_float(e) for e in group["etas"])
        low, high = (as_float(s) for s in group["step_sizes"])
        slope = max(etaplus - 1, 1 - etaminus)
        states = [self.state[p] for p in params]
        self.step_all(group, [s["step"] for s in states])
        lists = [params, grads, [s["prev"] for s in states], [s["step_size"] for s in states]]
        if self.run_native(group, "rprop_step", lists, [etaminus, etaplus, low, high]):
            return
        for ops, (ps, gs, prevs, sizes), _ in self.blocks(group, lists):
            signs, factors = self.block_scratch(ps, 0), self.block_scratch(ps, 1)
            ops.mul_into(signs, gs, prevs)
            ops.sign_(signs)
            if len(ps) == 1:  # a flat buffer's or a large tensor's block: 10 passes, not 12
                _one_tensor(ps[0], gs[0], prevs[0], sizes[0], signs[0], factors[0], group)
                continue
            ops.mul_scalar_into(factors, signs, slope)
            ops.add_scalar_(factors, 1.0)
            ops.clamp_(factors, etaminus, etaplus)
            ops.mul_t_(sizes, factors)
            ops.clamp_(sizes, low, high)
            ops.add_scalar_into(factors, signs, 1.0)
            ops.clamp_(factors, 0.0, 1.0)
            ops.mul_into(prevs, gs, factors)
            ops.sign_into(signs, prevs)
            ops.addcmul_(ps, signs, sizes, -1.0)


def _one_tensor(
    p: torch.Tensor,
    g: torch.Tensor,
    prev: torch.Tensor,
    size: torch.Tensor,
    sign: torch.Tensor,
    factor: torch.Tensor,
    group: dict[str, Any],
) -> None:
    """The rest of the update of one tensor, given ``sign = sign(g * prev)``, in fewer passes.

    ``1 + a s`` in one ``add`` (``a s`` is exact for ``s`` in {-1, 0, 1}), and the mask of the
    kept gradient as one ``heaviside(s, 1)``: the numbers of the general path, to the bit.
    """
    etaminus, etaplus = (as_float(e) for e in group["etas"])
    low, high = (as_float(s) for s in group["step_sizes"])
    one = torch.ones((), dtype=sign.dtype, device=sign.device)
    torch.add(one, sign, alpha=max(etaplus - 1, 1 - etaminus), out=factor)
    factor.clamp_(etaminus, etaplus)
    size.mul_(factor).clamp_(low, high)
    torch.heaviside(sign, one, out=factor)  # 0 where the sign flipped (s < 0), else 1
    torch.mul(g, factor, out=prev)
    torch.sign(prev, out=sign)
    p.addcmul_(sign, size, value=-1.0)
