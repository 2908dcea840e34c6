"""What every behavioural conformance check shares: results, opt-outs and the failure raised.

A check (:func:`plugtrain.testing.check_optimizer` and its siblings) tries a list of named
*properties* on a component. Each property passes, fails with a message that gives the values
involved, or does not apply (the component lacks what the property is about, e.g. a ``foreach``
argument); an author opts out of a property that applies by naming it in ``skip`` with the
reason, which the report keeps. Every failure is collected before :class:`ConformanceError` is
raised, so one run shows all of them.

Imports neither torch nor pytest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import attrs

__all__ = [
    "ConformanceError",
    "ConformanceReport",
    "NotApplicable",
    "PropertyFailed",
    "PropertyResult",
    "run_properties",
]

Outcome = Literal["passed", "failed", "skipped", "not applicable"]


class PropertyFailed(Exception):
    """Raised inside a property with what went wrong (the values involved)."""


class NotApplicable(Exception):
    """Raised inside a property that does not apply to this component, with the reason."""


@attrs.frozen
class PropertyResult:
    """The outcome of one property.

    :param name: the property's name, as ``skip`` takes it (``"state_round_trip"``).
    :param outcome: ``passed``, ``failed``, ``skipped`` (opted out) or ``not applicable``.
    :param detail: for anything but ``passed``: the failure, the reason given, or why not.
    """

    name: str
    outcome: Outcome
    detail: str = ""


@attrs.frozen
class ConformanceReport:
    """Every property tried on one component.

    :param component: what was checked, e.g. ``"optimizer SGD"``.
    :param results: one entry per property, in the order tried.
    """

    component: str
    results: tuple[PropertyResult, ...]

    @property
    def failures(self) -> list[PropertyResult]:
        """The properties that failed."""
        return [r for r in self.results if r.outcome == "failed"]

    def outcome(self, name: str) -> Outcome:
        """The outcome of the property ``name``."""
        for result in self.results:
            if result.name == name:
                return result.outcome
        message = f"no property {name!r} in this report"
        raise KeyError(message)

    def __str__(self) -> str:
        lines = [f"conformance of {self.component}:"]
        for r in self.results:
            lines.append(f"  {r.name}: {r.outcome}" + (f": {r.detail}" if r.detail else ""))
        return "\n".join(lines)


class ConformanceError(AssertionError):
    """Raised by a check when a property fails; ``report`` holds every outcome.

    Its message lists each failed property with the values involved.
    """

    def __init__(self, report: ConformanceReport) -> None:
        self.report = report
        lines = [
            f"{report.component} breaks {len(report.failures)} conformance "
            f"propert{'y' if len(report.failures) == 1 else 'ies'}:"
        ]
        lines += [f"  {r.name}: {r.detail}" for r in report.failures]
        super().__init__("\n".join(lines))


Property = Callable[[], None]


def run_properties(
    component: str,
    properties: Mapping[str, Property],
    skip: Mapping[str, str] | None,
    *,
    raise_on_failure: bool = True,
    first: Property | None = None,
) -> ConformanceReport:
    """Try each property (in order) unless ``skip`` names it; raise when one failed.

    :param first: tried before the properties (building the component at all); when it fails,
        that failure (as property ``construction``) is the only result.

    :param component: how messages name the component (``"optimizer SGD"``).
    :param properties: property name -> a callable raising :class:`PropertyFailed` or
        :class:`NotApplicable`; any other exception is a failure too.
    :param skip: property name -> the reason it is skipped; a reason is required and an unknown
        name is an error (a typo must not skip nothing silently).
    :raises ConformanceError: when a property failed and ``raise_on_failure``.
    :raises ValueError: for an unknown property name or an empty reason in ``skip``.
    """
    skip = dict(skip or {})
    unknown = sorted(set(skip) - set(properties))
    if unknown:
        message = (
            f"skip names unknown properties {unknown}; the properties of {component} are: "
            f"{', '.join(properties)}"
        )
        raise ValueError(message)
    unexplained = sorted(name for name, reason in skip.items() if not str(reason).strip())
    if unexplained:
        message = f"skip needs a reason for each property it names; none given for {unexplained}"
        raise ValueError(message)
    results: list[PropertyResult] = []
    if first is not None:
        try:
            first()
        except Exception as exc:
            report = ConformanceReport(
                component, (PropertyResult("construction", "failed", str(exc)),)
            )
            if raise_on_failure:
                raise ConformanceError(report) from exc
            return report
    for name, check in properties.items():
        if name in skip:
            results.append(PropertyResult(name, "skipped", skip[name]))
            continue
        try:
            check()
        except NotApplicable as exc:
            results.append(PropertyResult(name, "not applicable", str(exc)))
        except PropertyFailed as exc:
            results.append(PropertyResult(name, "failed", str(exc)))
        except Exception as exc:  # noqa: BLE001 - the component's own error is the failure
            results.append(PropertyResult(name, "failed", f"raised {type(exc).__name__}: {exc}"))
        else:
            results.append(PropertyResult(name, "passed"))
    report = ConformanceReport(component, tuple(results))
    if raise_on_failure and report.failures:
        raise ConformanceError(report)
    return report


def construction(
    component: str, build: Callable[[], object], arguments: Mapping[str, object] | None
) -> Property:
    """A ``first`` step for :func:`run_properties`: ``build()`` must succeed."""

    def builds() -> None:
        try:
            build()
        except Exception as exc:
            message = (
                f"{component} cannot be built with arguments {dict(arguments or {})}: "
                f"{type(exc).__name__}: {exc}"
            )
            raise PropertyFailed(message) from exc

    return builds


def names_of(properties: Iterable[str]) -> str:
    """``"a, b, c"``, for docstrings and messages."""
    return ", ".join(properties)
