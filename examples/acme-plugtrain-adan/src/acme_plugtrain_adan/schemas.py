"""The argument schema of Adan; torch-free, so listing and validating never import torch."""

from __future__ import annotations

import attrs

from plugtrain.schema import arg

__all__ = ["DEFAULT_BETAS", "DEFAULT_LR", "AdanArgs"]

DEFAULT_LR = 1e-3
"""The learning rate the Adan authors use by default."""

DEFAULT_BETAS = (0.98, 0.92, 0.99)
"""Decay rates of the gradient, gradient-difference and squared-update averages."""


@attrs.frozen
class AdanArgs:
    """Adan: adaptive Nesterov momentum (Xie et al., 2022), bias-corrected as by its authors.

    Keeps averages of the gradient (``m``), of the difference of successive gradients (``v``)
    and of the squared Nesterov-extrapolated gradient (``n``) and steps along
    ``(m + beta2 * v) / (sqrt(n) + eps)``; weight decay is proximal
    (``p <- (p - update) / (1 + lr * weight_decay)``) unless ``no_prox`` is set.
    """

    lr: float = arg(DEFAULT_LR, help="learning rate", ge=0, aliases=("learning_rate",))
    betas: tuple[float, float, float] = arg(
        DEFAULT_BETAS,
        help="decay rates of the gradient, gradient-difference and squared averages",
        ge=0,
        lt=1,
    )
    eps: float = arg(1e-8, help="added to the denominator for numerical stability", ge=0)
    weight_decay: float = arg(0.0, help="decoupled weight decay", ge=0)
    no_prox: bool = arg(
        False,
        help="decay as p <- (1 - lr * weight_decay) * p - update instead of the proximal form",
    )
    foreach: bool | None = arg(
        None, help="use the multi-tensor (foreach) path; None picks it where supported"
    )
