"""Model Zoo's initializers: a bare name or ``{name: ..., args}``.

:func:`make_initializer` turns such a spec into a function that fills a tensor in place;
:func:`scaled` multiplies a (truncated) normal's std, and its bounds with it, as muP and the
depth scaling of the output layers do.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["Init", "default_initializer", "make_initializer", "scaled"]

Init = Callable[[torch.Tensor], None]
"""Fills a tensor in place."""

TRUNCATED_STD_FACTOR = 0.8796256610342398
"""std of a standard normal truncated to [-2, 2] (variance_scaling divides by it)."""

_DEFAULTS: dict[str, dict[str, Any]] = {
    "constant": {"val": 0.0},
    "ones": {},
    "zeros": {},
    "eye": {},
    "uniform": {"a": -0.05, "b": 0.05},
    "normal": {"mean": 0.0, "std": 0.05},
    "xavier_normal": {"gain": 1.0},
    "glorot_normal": {"gain": 1.0},
    "xavier_uniform": {"gain": 1.0},
    "glorot_uniform": {"gain": 1.0},
    "kaiming_normal": {"a": 0.0, "mode": "fan_in", "nonlinearity": "leaky_relu"},
    "kaiming_uniform": {"a": 0.0, "mode": "fan_in", "nonlinearity": "leaky_relu"},
    "truncated_normal": {"mean": 0.0, "std": 0.05, "a": None, "b": None},
    "variance_scaling": {"scale": 1.0, "mode": "fan_in", "distribution": "truncated_normal"},
    "lecun_normal": {},
    "lecun_uniform": {},
}


def _spec(spec: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    arguments = dict(spec)
    return str(arguments.pop("name")), arguments


def _variance_scaling(tensor: torch.Tensor, scale: float, mode: str, distribution: str) -> None:
    fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(tensor)
    fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    variance = scale / max(1.0, fan)
    if distribution == "uniform":
        bound = math.sqrt(3.0 * variance)
        nn.init.uniform_(tensor, -bound, bound)
    elif distribution == "normal":
        nn.init.normal_(tensor, 0.0, math.sqrt(variance))
    else:
        std = math.sqrt(variance) / TRUNCATED_STD_FACTOR
        nn.init.trunc_normal_(tensor, 0.0, std, -2 * std, 2 * std)


def _fill(function: Callable[..., Any], *args: Any) -> Init:
    """An :data:`Init` calling ``function(tensor, *args)``."""

    def init(tensor: torch.Tensor) -> None:
        function(tensor, *args)

    return init


def make_initializer(spec: str | Mapping[str, Any]) -> Init:
    """The function a Model Zoo initializer spec stands for; unused arguments warn."""
    name, given = _spec(spec)
    arguments = {**_DEFAULTS[name], **given}
    unused = sorted(set(given) - set(_DEFAULTS[name]))
    if unused:
        warnings.warn(f"initializer {name}: unused arguments {unused}", UserWarning, stacklevel=2)
        for key in unused:
            arguments.pop(key)
    if name == "truncated_normal":
        std, mean = float(arguments["std"]), float(arguments["mean"])
        low = -2 * std if arguments["a"] is None else float(arguments["a"])
        high = 2 * std if arguments["b"] is None else float(arguments["b"])
        return _fill(nn.init.trunc_normal_, mean, std, low, high)
    a = arguments
    table: dict[str, Callable[[], Init]] = {
        "constant": lambda: _fill(nn.init.constant_, float(a["val"])),
        "ones": lambda: _fill(nn.init.ones_),
        "zeros": lambda: _fill(nn.init.zeros_),
        "eye": lambda: _fill(nn.init.eye_),
        "uniform": lambda: _fill(nn.init.uniform_, float(a["a"]), float(a["b"])),
        "normal": lambda: _fill(nn.init.normal_, float(a["mean"]), float(a["std"])),
        "xavier_normal": lambda: _fill(nn.init.xavier_normal_, float(a["gain"])),
        "glorot_normal": lambda: _fill(nn.init.xavier_normal_, float(a["gain"])),
        "xavier_uniform": lambda: _fill(nn.init.xavier_uniform_, float(a["gain"])),
        "glorot_uniform": lambda: _fill(nn.init.xavier_uniform_, float(a["gain"])),
        "kaiming_normal": lambda: _fill(
            nn.init.kaiming_normal_, a["a"], a["mode"], a["nonlinearity"]
        ),
        "kaiming_uniform": lambda: _fill(
            nn.init.kaiming_uniform_, a["a"], a["mode"], a["nonlinearity"]
        ),
        "lecun_normal": lambda: _fill(_variance_scaling, 1.0, "fan_in", "truncated_normal"),
        "lecun_uniform": lambda: _fill(_variance_scaling, 1.0, "fan_in", "uniform"),
        "variance_scaling": lambda: _fill(
            _variance_scaling, float(a["scale"]), a["mode"], a["distribution"]
        ),
    }
    return table[name]()


def default_initializer(std: float) -> dict[str, Any]:
    """Model Zoo's default: ``truncated_normal(std, a=-2 std, b=2 std)`` as a spec."""
    return {"name": "truncated_normal", "mean": 0.0, "std": std, "a": -2 * std, "b": 2 * std}


def scaled(spec: str | Mapping[str, Any], factor: float) -> str | Mapping[str, Any]:
    """``spec`` with its std (and truncation bounds) multiplied by ``factor``.

    Only (truncated) normal specs have a std; others come back unchanged.
    """
    if factor == 1.0 or isinstance(spec, str):
        return spec
    name, arguments = _spec(spec)
    if name not in ("truncated_normal", "normal"):
        return spec
    std = float(arguments.get("std", 0.05))
    result = {"name": name, **arguments, "std": std * factor}
    if name == "truncated_normal":
        for bound, sign in (("a", -1.0), ("b", 1.0)):
            value = arguments.get(bound)
            result[bound] = sign * 2 * std * factor if value is None else float(value) * factor
    return result
