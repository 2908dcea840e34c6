"""Adadelta, Adagrad, ASGD and RMSprop: torch's update rules with cstorch's defaults."""

from __future__ import annotations

import math
from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import AdadeltaArgs, AdagradArgs, ASGDArgs, RMSpropArgs

__all__ = ["ASGD", "Adadelta", "Adagrad", "RMSprop"]


def _zeros(param: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(param, memory_format=torch.preserve_format)


class Adadelta(PlugtrainOptimizer):
    """Adadelta (torch's rule, L2 ``weight_decay``).

    ``s = rho s + (1 - rho) g^2``; ``d = sqrt(a + eps) / sqrt(s + eps) * g``;
    ``a = rho a + (1 - rho) d^2``; ``p -= lr d``.
    """

    schema = AdadeltaArgs
    name = "Adadelta"
    flat_by_default = True  # measured: pays even with the gradient copy
    native_kernels = True

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter and zero running averages."""
        state["step"] = self.new_step()
        state["square_avg"] = _zeros(param)
        state["acc_delta"] = _zeros(param)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Adadelta step over ``params`` (cache blocks: the intermediates stay in cache)."""
        lr, rho, eps = (as_float(group[k]) for k in ("lr", "rho", "eps"))
        wd = as_float(group["weight_decay"])
        states = [self.state[p] for p in params]
        self.step_all(group, [s["step"] for s in states])
        lists = [params, grads, [s["square_avg"] for s in states], [s["acc_delta"] for s in states]]
        flip = -1.0 if group["maximize"] else 1.0
        scalars = [lr, rho, 1 - rho, eps, wd, flip]
        if self.run_native(group, "adadelta_step", lists, scalars):
            return
        for ops, (ps, gs, sqs, accs), _ in self.blocks(group, lists):
            gs = self.effective_grads(  # noqa: PLW2901
                ops, ps, gs, weight_decay=wd, maximize=group["maximize"], slot=2
            )
            ops.mul_(sqs, rho)
            ops.addcmul_(sqs, gs, gs, 1 - rho)
            std, delta = self.block_scratch(ps, 0), self.block_scratch(ps, 1)
            # sqrt(a + eps) / sqrt(s + eps) as one root of the quotient (equal up to rounding).
            ops.add_scalar_into(std, sqs, eps)
            ops.add_scalar_into(delta, accs, eps)
            ops.div_t_(delta, std)
            ops.sqrt_(delta)
            ops.mul_t_(delta, gs)
            ops.mul_(accs, rho)
            ops.addcmul_(accs, delta, delta, 1 - rho)
            ops.add_(ps, delta, alpha=-lr)


class Adagrad(PlugtrainOptimizer):
    """Adagrad: ``s += g^2``; ``p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)``."""

    schema = AdagradArgs
    name = "Adagrad"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter and the sum of squares at ``initial_accumulator_value``."""
        state["step"] = self.new_step()
        init = as_float(group["initial_accumulator_value"])
        state["sum"] = torch.full_like(param, init, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Adagrad step over ``params`` (torch's fused kernel where it runs: same rule)."""
        lr, decay, eps = (as_float(group[k]) for k in ("lr", "lr_decay", "eps"))
        wd = as_float(group["weight_decay"])
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        ts = self.step_all(group, steps)
        lists = [params, grads, [s["sum"] for s in states]]
        if self.can_fuse(group, params) and all(
            p.dtype in (torch.float32, torch.float64) or p.device.type != "cpu" for p in params
        ):
            for run, _, _ in self.fused_runs(group, [*lists, steps], ts):
                torch._fused_adagrad_(
                    *run,
                    lr=lr,
                    lr_decay=decay,
                    weight_decay=wd,
                    eps=eps,
                    maximize=bool(group["maximize"]),
                    grad_scale=None,
                    found_inf=None,
                )
            return
        sizes = [-lr / (1 + (t - 1) * decay) for t in ts]
        for ops, (ps, gs, sums), (size,) in self.blocks(group, lists, [sizes]):
            gs = self.effective_grads(  # noqa: PLW2901
                ops, ps, gs, weight_decay=wd, maximize=group["maximize"], slot=1
            )
            ops.addcmul_(sums, gs, gs, 1.0)
            std = self.block_scratch(ps, 0)
            ops.sqrt_into(std, sums)
            ops.add_scalar_(std, eps)
            ops.addcdiv_(ps, gs, std, size)


class ASGD(PlugtrainOptimizer):
    """Averaged SGD (torch's rule); ``eta`` and ``mu`` are kept as Python floats in the state.

    ``p *= 1 - lambd eta``; ``p -= eta g``; ``ax += mu (p - ax)`` (a copy while ``mu = 1``);
    then ``eta = lr / (1 + lambd lr t)^alpha`` and ``mu = 1 / max(1, t - t0)``.
    """

    kernels_match_torch_path = True

    schema = ASGDArgs
    name = "ASGD"
    flat_by_default = True  # one native call (or one kernel per operation) for many tensors
    native_kernels = True

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter, ``eta = lr``, ``mu = 1`` and a zero average."""
        state["step"] = self.new_step()
        state["eta"] = as_float(group["lr"])
        state["mu"] = 1.0
        state["ax"] = _zeros(param)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One ASGD step over ``params``."""
        lambd = as_float(group["lambd"])
        wd = as_float(group["weight_decay"])
        states = [self.state[p] for p in params]
        ts = self.step_all(group, [s["step"] for s in states])
        lists = [params, grads, [s["ax"] for s in states]]
        etas = [s["eta"] for s in states]
        mus = [s["mu"] for s in states]
        flip = -1.0 if group["maximize"] else 1.0
        decays = [1 - lambd * eta for eta in etas]
        if self.run_native(group, "asgd_step", lists, [etas, decays, mus, wd, flip]):
            self._advance(group, states, ts)
            return
        for ops, (ps, gs, axs), (eta_, mu_) in self.blocks(group, lists, [etas, mus]):
            gs = self.effective_grads(  # noqa: PLW2901
                ops, ps, gs, weight_decay=wd, maximize=group["maximize"], slot=0
            )
            for (eta, mu), where in self.split_by(list(zip(eta_, mu_, strict=True))):  # type: ignore[misc]
                p_, g_, ax_ = self.take([ps, gs, axs], where)
                ops.mul_(p_, 1 - lambd * eta)
                ops.add_(p_, g_, alpha=-eta)
                if mu != 1:
                    ops.lerp_(ax_, p_, mu)
                else:
                    ops.copy_(ax_, p_)
        self._advance(group, states, ts)

    @staticmethod
    def _advance(group: dict[str, Any], states: list[dict[str, Any]], ts: list[float]) -> None:
        """The next step's ``eta`` and ``mu`` of each parameter."""
        lr, lambd, alpha, t0 = (as_float(group[k]) for k in ("lr", "lambd", "alpha", "t0"))
        for state, t in zip(states, ts, strict=True):
            state["eta"] = lr / ((1 + lambd * lr * t) ** alpha)
            state["mu"] = 1 / max(1.0, t - t0)


class RMSprop(PlugtrainOptimizer):
    """RMSprop (torch's rule, L2 ``weight_decay``).

    ``s = alpha s + (1 - alpha) g^2``; ``avg = sqrt(s - gavg^2 if centered else s) + eps``;
    ``buf = momentum buf + g / avg``; ``p -= lr buf`` (``lr g / avg`` without momentum).
    """

    schema = RMSpropArgs
    name = "RMSprop"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter, square average, and the momentum buffer / gradient average in use."""
        state["step"] = self.new_step()
        state["square_avg"] = _zeros(param)
        if as_float(group["momentum"]) > 0:
            state["momentum_buffer"] = _zeros(param)
        if group["centered"]:
            state["grad_avg"] = _zeros(param)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One RMSprop step over ``params``."""
        lr, alpha, eps = (as_float(group[k]) for k in ("lr", "alpha", "eps"))
        wd, momentum = as_float(group["weight_decay"]), as_float(group["momentum"])
        centered = bool(group["centered"])
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        ts = self.step_all(group, steps)
        lists = [params, grads, [s["square_avg"] for s in states]]
        if momentum == 0 and not centered and alpha < 1 and self.can_fuse(group, params):
            self._fused(group, [*lists, steps], ts, lr=lr, alpha=alpha, eps=eps, wd=wd)
            return
        if momentum > 0:
            lists.append([s["momentum_buffer"] for s in states])
        if centered:
            lists.append([s["grad_avg"] for s in states])
        for ops, run, _ in self.blocks(group, lists):
            ps, gs, sqs = run[:3]
            gs = self.effective_grads(ops, ps, gs, weight_decay=wd, slot=1)
            ops.mul_(sqs, alpha)
            ops.addcmul_(sqs, gs, gs, 1 - alpha)
            avg = self.block_scratch(ps, 0)
            if centered:
                gavg = run[-1]
                ops.lerp_(gavg, gs, 1 - alpha)
                ops.copy_(avg, sqs)
                ops.addcmul_(avg, gavg, gavg, -1.0)
                ops.sqrt_(avg)
            else:
                ops.sqrt_into(avg, sqs)
            ops.add_scalar_(avg, eps)
            if momentum > 0:
                bufs = run[3]
                ops.mul_(bufs, momentum)
                ops.addcdiv_(bufs, gs, avg, 1.0)
                ops.add_(ps, bufs, alpha=-lr)
            else:
                ops.addcdiv_(ps, gs, avg, -lr)

    def _fused(
        self,
        group: dict[str, Any],
        lists: list[list[torch.Tensor]],
        ts: list[float],
        *,
        lr: float,
        alpha: float,
        eps: float,
        wd: float,
    ) -> None:
        """Plain RMSprop through torch's fused Adam kernel (one pass over memory).

        With ``beta1 = 0`` the kernel's first moment is the (L2-decayed) gradient and its second
        moment is RMSprop's square average (``beta2 = alpha``). It divides ``sqrt(s)`` by
        ``c = sqrt(1 - alpha^t)``; ``lr / c`` and ``eps / c`` undo that:
        ``lr/c * g / (sqrt(s)/c + eps/c) = lr * g / (sqrt(s) + eps)``. The first moment lives in
        scratch, zeroed at each step (``0 * m`` must not carry a non-finite value over).
        """
        for run, values, _ in self.fused_runs(group, lists, ts):
            ps, gs, sqs, steps = run
            firsts = self.block_scratch(ps, 3)
            torch._foreach_zero_(firsts)
            for t, where in self.split_by(values):
                p_, g_, m_, s_, t_ = self.take([ps, gs, firsts, sqs, steps], where)
                c = math.sqrt(1 - alpha ** float(t))  # type: ignore[arg-type]
                torch._fused_adam_(
                    p_,
                    g_,
                    m_,
                    s_,
                    [],
                    t_,
                    amsgrad=False,
                    lr=lr / c,
                    beta1=0.0,
                    beta2=alpha,
                    weight_decay=wd,
                    eps=eps / c,
                    maximize=False,
                )
