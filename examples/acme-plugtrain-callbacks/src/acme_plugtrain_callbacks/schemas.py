"""Argument schemas (torch-free: ``plugtrain check`` reads them)."""

from __future__ import annotations

import attrs

from plugtrain.schema import arg


@attrs.frozen
class LossEMAArgs:
    """An exponential moving average of the training loss, logged as loss_ema."""

    decay: float = arg(0.9, help="weight of the previous average", gt=0, lt=1)


@attrs.frozen
class StdoutLoggerArgs:
    """One line per metrics record on standard output."""

    prefix: str = arg("acme", help="what each line starts with")
    digits: int = arg(4, help="digits after the decimal point", ge=0, le=12)
