"""Closed forms of every schedule: a value as a pure function of the step. No torch here.

Each builder checks nothing (the schemas validate arguments) and returns a
:class:`plugtrain.curve.Curve`, whose ``at(step)`` costs the same at step 10 and at step 10**9:
no builder iterates over past steps, and step functions with many pieces find theirs by
bisection.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence

from plugtrain.curve import Curve

__all__ = [
    "chained",
    "constant",
    "cosine_annealing",
    "cosine_annealing_warm_restarts",
    "cosine_decay",
    "cyclic",
    "exponential",
    "inverse_exponential_time_decay",
    "inverse_square_root_decay",
    "lambda_curve",
    "multi_step",
    "multiplicative",
    "one_cycle",
    "piecewise_constant",
    "polynomial",
    "sequential",
    "step",
]


def _power(base: float, exponent: float) -> float:
    """``base ** exponent`` that saturates to ``inf`` instead of raising on overflow."""
    try:
        return float(base**exponent)
    except OverflowError:
        return math.inf


def constant(value: float, total_iters: int | None = None) -> Curve:
    """``value`` at every step."""
    return Curve(lambda _step: value, total_iters)


def polynomial(
    initial: float, end: float, total_iters: int, power: float = 1.0, cycle: bool = False
) -> Curve:
    """``(initial - end) * (1 - e / T) ** power + end``, held at ``end`` from ``T`` on.

    With ``cycle``, ``T`` becomes ``T * ceil(e / T)`` (``T`` at ``e = 0``), so the decay
    restarts from ``initial`` right after each multiple of ``T``.
    """
    # Weighting both ends (rather than end + height * w) returns them exactly at w = 1 and 0.
    if cycle:

        def at(step: int) -> float:
            span = total_iters * max(1, -(-step // total_iters))
            w = (1.0 - step / span) ** power
            return initial * w + end * (1.0 - w)

    else:

        def at(step: int) -> float:
            if step >= total_iters:
                return end
            w = (1.0 - step / total_iters) ** power
            return initial * w + end * (1.0 - w)

    return Curve(at, total_iters)


def exponential(
    initial: float, total_iters: int, decay_rate: float, staircase: bool = False
) -> Curve:
    """``initial * decay_rate ** (e / T)`` (``floor(e / T)`` under ``staircase``); not clamped."""
    if staircase:
        return Curve(lambda e: initial * _power(decay_rate, e // total_iters), total_iters)
    return Curve(lambda e: initial * _power(decay_rate, e / total_iters), total_iters)


def inverse_exponential_time_decay(
    initial: float,
    step_exponent: float,
    total_iters: int,
    decay_rate: float,
    staircase: bool = False,
) -> Curve:
    """``initial / (1 + decay_rate * x)``, ``x = e ** step_exponent / T`` (floored: staircase)."""

    def at(step: int) -> float:
        x = _power(step, step_exponent) / total_iters
        if staircase:
            x = math.floor(x) if math.isfinite(x) else x
        return initial / (1.0 + decay_rate * x)

    return Curve(at, total_iters)


def inverse_square_root_decay(initial: float, scale: float, warmup_steps: float) -> Curve:
    """``initial * scale / sqrt(max(warmup_steps, e))``."""
    top = initial * scale
    return Curve(lambda e: top / math.sqrt(max(warmup_steps, e)))


def cosine_decay(initial: float, end: float, total_iters: int) -> Curve:
    """``end + (initial - end) * (1 + cos(pi * min(e, T) / T)) / 2``."""
    scale = math.pi / total_iters

    def at(step: int) -> float:
        if step >= total_iters:
            return end
        w = 0.5 * (1.0 + math.cos(scale * step))
        return initial * w + end * (1.0 - w)

    return Curve(at, total_iters)


def cosine_annealing(initial: float, t_max: int, eta_min: float = 0.0) -> Curve:
    """``eta_min + (initial - eta_min) * (1 + cos(pi * e / T_max)) / 2``; period ``2 T_max``."""
    half = 0.5 * (initial - eta_min)
    scale = math.pi / t_max
    period = 2 * t_max
    # Reducing e modulo the period first keeps cos() accurate at huge step counts.
    return Curve(lambda e: eta_min + half * (1.0 + math.cos(scale * (e % period))))


def _restart_index(step: int, t_0: int, t_mult: int) -> tuple[int, int]:
    """``(start, length)`` of the warm-restart period holding ``step`` (torch's definition)."""
    if t_mult == 1:
        return step - step % t_0, t_0
    # Period n starts at T_0 (m^n - 1) / (m - 1); the float log only guesses n, the two loops
    # make it exact so boundaries never misround.
    n = int(math.log(step * (t_mult - 1) / t_0 + 1, t_mult))
    while n > 0 and t_0 * (t_mult**n - 1) // (t_mult - 1) > step:
        n -= 1
    while t_0 * (t_mult ** (n + 1) - 1) // (t_mult - 1) <= step:
        n += 1
    return t_0 * (t_mult**n - 1) // (t_mult - 1), t_0 * t_mult**n


def cosine_annealing_warm_restarts(
    initial: float, t_0: int, t_mult: int = 1, eta_min: float = 0.0
) -> Curve:
    """Cosine from ``initial`` towards ``eta_min`` over each period, restarting after it.

    Periods last ``T_0, T_0 * T_mult, T_0 * T_mult**2, ...`` (torch's SGDR definition).
    """
    half = 0.5 * (initial - eta_min)

    def at(step: int) -> float:
        start, length = _restart_index(step, t_0, t_mult)
        return eta_min + half * (1.0 + math.cos(math.pi * (step - start) / length))

    return Curve(at)


def multi_step(initial: float, gamma: float, milestones: Sequence[int]) -> Curve:
    """``initial * gamma ** (number of milestones <= e)``, in any order, repeats counted."""
    marks = sorted(milestones)
    values = [initial * _power(gamma, i) for i in range(len(marks) + 1)]
    return Curve(lambda e: values[bisect_right(marks, e)])


def step(initial: float, step_size: int, gamma: float) -> Curve:
    """``initial * gamma ** floor(e / step_size)``."""
    return Curve(lambda e: initial * _power(gamma, e // step_size))


def multiplicative(initial: float, coefficient: float) -> Curve:
    """``initial * coefficient ** e``."""
    return Curve(lambda e: initial * _power(coefficient, e))


def lambda_curve(initial: float, factor: Callable[[int], float]) -> Curve:
    """``initial * factor(e)`` for a Python callable ``factor``."""
    return Curve(lambda e: initial * factor(e))


def cyclic(
    base: float,
    peak: float,
    step_size_up: int = 2000,
    step_size_down: int | None = None,
    mode: str = "triangular",
    gamma: float = 1.0,
    scale_mode: str | None = None,
) -> Curve:
    """Torch's CyclicLR wave between ``base`` and ``peak``.

    A cycle lasts ``up + down`` steps; the amplitude is scaled by ``1``, ``2 ** -(x - 1)`` or
    ``gamma ** x`` (``mode`` triangular, triangular2, exp_range), where ``x`` is the cycle number
    (from 1) under ``scale_mode='cycle'`` and the step under ``'iterations'``. ``None`` is
    torch's default: ``'iterations'`` for exp_range, ``'cycle'`` for the triangular modes.
    """
    if scale_mode is None:
        scale_mode = "iterations" if mode == "exp_range" else "cycle"
    down = step_size_up if step_size_down is None else step_size_down
    total = float(step_size_up + down)
    ratio = step_size_up / total
    height = peak - base
    if mode == "triangular":

        def scale(_x: float) -> float:
            return 1.0

    elif mode == "triangular2":

        def scale(x: float) -> float:
            return 1.0 / _power(2.0, x - 1)

    else:

        def scale(x: float) -> float:
            return _power(gamma, x)

    by_cycle = scale_mode == "cycle"

    def at(e: int) -> float:
        cycle = math.floor(1 + e / total)
        x = 1.0 + e / total - cycle
        factor = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        return base + height * factor * scale(cycle if by_cycle else e)

    return Curve(at)


def one_cycle(
    initial: float,
    peak: float,
    total_steps: int = 1000,
    pct_start: float = 0.3,
    final_div_factor: float = 1e4,
    three_phase: bool = False,
    anneal_strategy: str = "cos",
) -> Curve:
    """The 1cycle policy: ``initial -> peak -> initial / final_div_factor``, then held.

    With ``three_phase``: ``initial -> peak -> initial -> initial / final_div_factor``. The value
    is held from step ``total_steps - 1`` on.

    Phase ends are torch's: ``pct_start * N - 1`` (and ``2 * pct_start * N - 2``), ``N - 1``.
    """
    low = initial / final_div_factor
    rise = float(pct_start * total_steps) - 1
    last = float(total_steps - 1)
    if three_phase:
        phases = [(rise, initial, peak), (2 * rise, peak, initial), (last, initial, low)]
    else:
        phases = [(rise, initial, peak), (last, peak, low)]
    ends = [end for end, _, _ in phases[:-1]]
    starts = [0.0, *ends]
    if anneal_strategy == "cos":

        def anneal(start: float, end: float, pct: float) -> float:
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    else:

        def anneal(start: float, end: float, pct: float) -> float:
            return (end - start) * pct + start

    def at(e: int) -> float:
        if e >= last:
            return low
        # torch's phase test is "e <= end", hence bisect_left over the phase ends.
        i = bisect_left(ends, e)
        start_step = starts[i]
        end_step, start_value, end_value = phases[i]
        return anneal(start_value, end_value, (e - start_step) / (end_step - start_step))

    return Curve(at, total_steps)


def sequential(children: Sequence[Curve], milestones: Sequence[int] | None = None) -> Curve:
    """Child ``i = number of milestones <= e``, evaluated at ``e - milestone[i - 1]``.

    Omitted milestones are the running totals of the children's lengths (all but the last).

    :raises ValueError: when milestones are omitted and a child (but the last) has no length.
    """
    if milestones is None:
        milestones = _running_totals(children)
    marks = list(milestones)
    offsets = [0, *marks]
    ats = [child.at for child in children]

    def at(e: int) -> float:
        i = bisect_right(marks, e)
        return ats[i](e - offsets[i])

    length = children[-1].length
    return Curve(at, None if length is None else offsets[-1] + length)


def _running_totals(children: Sequence[Curve]) -> list[int]:
    totals = []
    done = 0
    for i, child in enumerate(children[:-1]):
        if child.length is None:
            message = (
                f"milestones are omitted but scheduler {i} has no total_iters to derive them "
                "from; give milestones"
            )
            raise ValueError(message)
        done += child.length
        totals.append(done)
    return totals


def piecewise_constant(values: Sequence[float], milestones: Sequence[int]) -> Curve:
    """``values[number of milestones <= e]``."""
    marks = list(milestones)
    held = list(values)
    return Curve(lambda e: held[bisect_right(marks, e)])


def chained(children: Sequence[Curve]) -> Curve:
    """``v_0(e) * prod_{i >= 1} v_i(e) / v_i(0)``: later children scale the first.

    :raises ValueError: when a later child starts at 0 (its ratio is undefined).
    """
    first = children[0].at
    rest = []
    for i, child in enumerate(children[1:], start=1):
        start = child.at(0)
        if start == 0:
            message = f"scheduler {i} of a chain starts at 0, so it cannot scale the chain"
            raise ValueError(message)
        rest.append((child.at, start))

    def at(e: int) -> float:
        value = first(e)
        for child_at, start in rest:
            value *= child_at(e) / start
        return value

    return Curve(at, children[0].length)
