"""In-place list operations with two back ends: multi-tensor (``torch._foreach_*``) and per-tensor.

Each optimizer writes its update once, against :class:`ListOps`; the multi-tensor path runs it on
whole runs of tensors sharing device and dtype, the per-tensor path on one tensor at a time with
plain tensor methods. Every operation works in place, so a step allocates nothing state-sized.
A ``scalar`` argument is a Python float or a list of floats (one per tensor).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["FOREACH", "PER_TENSOR", "ListOps", "Scalars"]

Tensors = Sequence[torch.Tensor]
Scalars = float | Sequence[float]


def _at(scalar: Scalars, i: int) -> float:
    return scalar if isinstance(scalar, int | float) else scalar[i]


class ListOps:
    """In-place operations on parallel lists of tensors.

    :param foreach: use the ``torch._foreach_*`` kernels (one call per list) instead of a loop of
        tensor methods.
    """

    def __init__(self, foreach: bool) -> None:
        self.foreach = foreach

    def mul_(self, xs: Tensors, scalar: Scalars) -> None:
        """``x *= s``."""
        if self.foreach:
            torch._foreach_mul_(xs, scalar)  # type: ignore[arg-type]
        else:
            for i, x in enumerate(xs):
                x.mul_(_at(scalar, i))

    def mul_t_(self, xs: Tensors, ys: Tensors) -> None:
        """``x *= y`` elementwise."""
        if self.foreach:
            torch._foreach_mul_(xs, ys)  # type: ignore[arg-type]
        else:
            for x, y in zip(xs, ys, strict=True):
                x.mul_(y)

    def div_t_(self, xs: Tensors, ys: Tensors) -> None:
        """``x /= y`` elementwise."""
        if self.foreach:
            torch._foreach_div_(xs, ys)  # type: ignore[arg-type]
        else:
            for x, y in zip(xs, ys, strict=True):
                x.div_(y)

    def add_scalar_(self, xs: Tensors, scalar: Scalars) -> None:
        """``x += s``."""
        if self.foreach:
            torch._foreach_add_(xs, scalar)  # type: ignore[arg-type]
        else:
            for i, x in enumerate(xs):
                x.add_(_at(scalar, i))

    def add_(self, xs: Tensors, ys: Tensors, alpha: float = 1.0) -> None:
        """``x += alpha * y``."""
        if self.foreach:
            torch._foreach_add_(xs, ys, alpha=alpha)  # type: ignore[arg-type]
        else:
            for x, y in zip(xs, ys, strict=True):
                x.add_(y, alpha=alpha)

    def addcmul_(self, xs: Tensors, ys: Tensors, zs: Tensors, value: Scalars = 1.0) -> None:
        """``x += value * y * z``."""
        if self.foreach:
            torch._foreach_addcmul_(xs, ys, zs, value)  # type: ignore[arg-type]
        else:
            for i, (x, y, z) in enumerate(zip(xs, ys, zs, strict=True)):
                x.addcmul_(y, z, value=_at(value, i))

    def addcdiv_(self, xs: Tensors, ys: Tensors, zs: Tensors, value: Scalars = 1.0) -> None:
        """``x += value * y / z``."""
        if self.foreach:
            torch._foreach_addcdiv_(xs, ys, zs, value)  # type: ignore[arg-type]
        else:
            for i, (x, y, z) in enumerate(zip(xs, ys, zs, strict=True)):
                x.addcdiv_(y, z, value=_at(value, i))

    def lerp_(self, xs: Tensors, ys: Tensors, weight: float) -> None:
        """``x += weight * (y - x)``."""
        if self.foreach:
            torch._foreach_lerp_(xs, ys, weight)  # type: ignore[arg-type]
        else:
            for x, y in zip(xs, ys, strict=True):
                x.lerp_(y, weight)

    def copy_(self, xs: Tensors, ys: Tensors) -> None:
        """``x = y``."""
        if self.foreach:
            torch._foreach_copy_(xs, ys)  # type: ignore[arg-type]
        else:
            for x, y in zip(xs, ys, strict=True):
                x.copy_(y)

    def sqrt_(self, xs: Tensors) -> None:
        """``x = sqrt(x)``."""
        if self.foreach:
            torch._foreach_sqrt_(xs)  # type: ignore[arg-type]
        else:
            for x in xs:
                x.sqrt_()

    def sqrt_into(self, outs: Tensors, xs: Tensors) -> None:
        """``out = sqrt(x)``: ``torch.sqrt(out=)`` per tensor, or copy and root for several.

        ``torch._foreach_sqrt.out`` takes a slow path on CPU, several times slower than either.
        """
        self._into(outs, xs, "sqrt")

    def _into(self, outs: Tensors, xs: Tensors, inplace: str, *args: object) -> None:
        """``out = op(x, *args)``: per tensor with ``out=`` for one tensor, else copy + in place."""
        if self.foreach and len(outs) > 1:
            torch._foreach_copy_(outs, xs)  # type: ignore[arg-type]
            getattr(torch, f"_foreach_{inplace}_")(outs, *args)
            return
        op = getattr(torch, inplace)
        for i, (out, x) in enumerate(zip(outs, xs, strict=True)):
            values = [a[i] if isinstance(a, list | tuple) else a for a in args]
            op(x, *values, out=out)

    def lerp_into(self, outs: Tensors, xs: Tensors, ys: Tensors, weight: float) -> None:
        """``out = x + weight * (y - x)``."""
        self._into(outs, xs, "lerp", list(ys), weight)

    def div_scalar_into(self, outs: Tensors, xs: Tensors, scalar: float) -> None:
        """``out = x / s`` (a division, not a product with ``1 / s``: the same bits as ``div``)."""
        self._into(outs, xs, "div", scalar)

    def mul_scalar_into(self, outs: Tensors, xs: Tensors, scalar: float) -> None:
        """``out = x * s``."""
        self._into(outs, xs, "mul", scalar)

    def add_scalar_into(self, outs: Tensors, xs: Tensors, scalar: float) -> None:
        """``out = x + s``."""
        self._into(outs, xs, "add", scalar)

    def mul_into(self, outs: Tensors, xs: Tensors, ys: Tensors) -> None:
        """``out = x * y`` elementwise."""
        self._into(outs, xs, "mul", list(ys))

    def div_into(self, outs: Tensors, xs: Tensors, ys: Tensors) -> None:
        """``out = x / y`` elementwise."""
        self._into(outs, xs, "div", list(ys))

    def rdiv_(self, xs: Tensors, ys: Tensors) -> None:
        """``x = y / x`` (one division per tensor; reciprocal and product for many)."""
        if self.foreach and len(xs) > 1:
            torch._foreach_reciprocal_(xs)  # type: ignore[arg-type]
            torch._foreach_mul_(xs, ys)  # type: ignore[arg-type]
            return
        for x, y in zip(xs, ys, strict=True):
            torch.div(y, x, out=x)

    def abs_into(self, outs: Tensors, xs: Tensors) -> None:
        """``out = |x|``."""
        self._into(outs, xs, "abs")

    def sign_into(self, outs: Tensors, xs: Tensors) -> None:
        """``out = sign(x)``."""
        self._into(outs, xs, "sign")

    def clamp_(self, xs: Tensors, low: float, high: float) -> None:
        """``x = min(max(x, low), high)`` (one pass per tensor; two foreach calls for many)."""
        if self.foreach and len(xs) > 4:
            torch._foreach_clamp_min_(xs, low)  # type: ignore[arg-type]
            torch._foreach_clamp_max_(xs, high)  # type: ignore[arg-type]
        else:
            for x in xs:
                x.clamp_(low, high)

    def reciprocal_(self, xs: Tensors) -> None:
        """``x = 1 / x``."""
        if self.foreach:
            torch._foreach_reciprocal_(xs)  # type: ignore[arg-type]
        else:
            for x in xs:
                x.reciprocal_()

    def rsqrt_(self, xs: Tensors) -> None:
        """``x = 1 / sqrt(x)``."""
        if self.foreach:
            torch._foreach_rsqrt_(xs)  # type: ignore[arg-type]
        else:
            for x in xs:
                x.rsqrt_()

    def abs_(self, xs: Tensors) -> None:
        """``x = |x|``."""
        if self.foreach:
            torch._foreach_abs_(xs)  # type: ignore[arg-type]
        else:
            for x in xs:
                x.abs_()

    def sign_(self, xs: Tensors) -> None:
        """``x = sign(x)``."""
        if self.foreach:
            torch._foreach_sign_(xs)  # type: ignore[arg-type]
        else:
            for x in xs:
                x.sign_()

    def maximum_(self, xs: Tensors, ys: Tensors) -> None:
        """``x = max(x, y)`` elementwise."""
        if self.foreach:
            torch._foreach_maximum_(xs, ys)  # type: ignore[arg-type]
        else:
            for x, y in zip(xs, ys, strict=True):
                torch.maximum(x, y, out=x)

    def norms(self, xs: Tensors) -> list[float]:
        """The Euclidean norm of each tensor, computed in at least float32."""
        if self.foreach and xs and xs[0].dtype in (torch.float32, torch.float64):
            norms = torch._foreach_norm(xs)  # type: ignore[arg-type]
            return torch.stack(norms).tolist() if len(norms) > 1 else [float(norms[0])]
        return [float(torch.linalg.vector_norm(x, dtype=_norm_dtype(x))) for x in xs]


def _norm_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


FOREACH = ListOps(foreach=True)
"""The multi-tensor back end."""

PER_TENSOR = ListOps(foreach=False)
"""The per-tensor back end."""
