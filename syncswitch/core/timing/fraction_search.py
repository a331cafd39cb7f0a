"""The offline timing policy: the binary search for the smallest BSP fraction that holds accuracy.

For a recurring job, a trial is one training run with schedule `bsp:<f>,asp` (BSP for the
fraction f of the samples, then ASP); f = 1 is the full-BSP baseline. A fraction *holds* when
the mean final accuracy of its repeats (one per seed; the same seeds for every fraction, so
fractions are compared on the same initialisations and data orders) is at most `tolerance`
points below the baseline's mean.

The search, as in the Sync-Switch paper:

1. run the baseline and f = 1/2;
2. while the fraction holds, halve it (1/4, 1/8, ...), but not below `resolution`;
3. once one fails, bisect between the last failing and the last holding fraction until they
   are at most `resolution` apart;
4. the answer is the last holding fraction (1 = stay with BSP when nothing smaller holds).

`next_step` is a pure function of the results so far: it replays the search from the start and
returns either the trials to run next or the decision, with its evidence and reason. Replaying
makes a resumed search take exactly the path an uninterrupted one would have taken, and lets a
test drive it with scripted accuracies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

BASELINE = 1.0  # full BSP
MIN_RESOLUTION = 1 / 4096  # finer fractions would not name a whole BSP update on most jobs


# Upper bounds on the search's sizes: each trial is a whole training run.
MAX_REPEATS = 64
MAX_TRIALS = 10_000


class SearchSpecError(ValueError):
    """Search settings that cannot describe a search; the message names value and range."""


class StepKind(StrEnum):
    RUN = "run"  # run these trials, then ask again
    DECIDE = "decide"  # the search is over


class StopReason(StrEnum):
    RESOLUTION = "resolution"  # halving would go below the resolution
    BRACKET = "bracket"  # failing and holding fractions are within the resolution
    BUDGET = "budget"  # the next fraction would exceed the trial budget


@dataclass(frozen=True, order=True)
class TrialKey:
    """One trial: a BSP fraction trained with one seed."""

    fraction: float
    seed: int


@dataclass(frozen=True)
class SearchSpec:
    tolerance_points: float = 0.5  # accuracy points (percent) a fraction may lose against BSP
    repeats: int = 2  # trials per fraction, seeds base_seed .. base_seed + repeats - 1
    resolution: float = 1 / 64  # the search stops refining below this fraction gap
    max_trials: int = 20  # trainings, the baseline's included
    base_seed: int = 0
    start: float = 0.5

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tolerance_points) and self.tolerance_points >= 0):
            raise SearchSpecError(
                f"tolerance = {self.tolerance_points!r} is not allowed; it must be a number "
                ">= 0 (accuracy points)"
            )
        if not 1 <= self.repeats <= MAX_REPEATS:
            raise SearchSpecError(
                f"repeats = {self.repeats!r} is not allowed; it must be in 1..{MAX_REPEATS}"
            )
        if not MIN_RESOLUTION <= self.resolution <= 0.5:
            raise SearchSpecError(
                f"resolution = {self.resolution!r} is not allowed; it must be in "
                f"[{format_fraction(MIN_RESOLUTION)}, 1/2]"
            )
        if not 0 < self.start < 1:
            raise SearchSpecError(f"start = {self.start!r} is not allowed; it must be in (0, 1)")
        if self.max_trials > MAX_TRIALS:
            raise SearchSpecError(
                f"max_trials = {self.max_trials!r} is not allowed; it must be <= {MAX_TRIALS}"
            )
        if self.max_trials < 2 * self.repeats:
            raise SearchSpecError(
                f"max_trials = {self.max_trials!r} is not allowed; it must be at least "
                f"2 x repeats = {2 * self.repeats} (the BSP baseline and one fraction)"
            )

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(self.base_seed + i for i in range(self.repeats))

    def holds(self, mean: float, bsp_mean: float) -> bool:
        # Accuracies are fractions in [0, 1]; the tolerance is in points. NaN never holds.
        return mean >= bsp_mean - self.tolerance_points / 100 - 1e-12


@dataclass(frozen=True)
class FractionEvidence:
    """The repeats of one fraction, and how they compare with the baseline."""

    fraction: float
    accuracies: tuple[float, ...]  # in seed order
    mean: float
    holds: bool
    below_bsp_points: float  # BSP mean minus this mean, in points (negative: above BSP)

    def to_plain(self) -> dict[str, Any]:
        return {
            "fraction": self.fraction,
            "label": format_fraction(self.fraction),
            "accuracies": list(self.accuracies),
            "mean": self.mean,
            "holds": self.holds,
            "below_bsp_points": self.below_bsp_points,
        }


@dataclass(frozen=True)
class SearchDecision:
    """The chosen BSP fraction, with everything it was decided on."""

    fraction: float
    stop: StopReason
    reason: str
    bsp_mean: float
    fraction_mean: float
    tolerance_points: float
    repeats: int
    trials_used: int
    baseline: tuple[float, ...]
    evidence: tuple[FractionEvidence, ...]  # fractions in the order they were tried

    @property
    def schedule(self) -> str:
        return schedule_for(self.fraction)

    def to_plain(self) -> dict[str, Any]:
        return {
            "fraction": self.fraction,
            "label": format_fraction(self.fraction),
            "schedule": self.schedule,
            "stop": self.stop.value,
            "reason": self.reason,
            "bsp_mean": self.bsp_mean,
            "fraction_mean": self.fraction_mean,
            "tolerance_points": self.tolerance_points,
            "repeats": self.repeats,
            "trials_used": self.trials_used,
            "baseline": list(self.baseline),
            "tried": [e.to_plain() for e in self.evidence],
        }


@dataclass(frozen=True)
class SearchStep:
    """What to do next: run `trials`, or stop with `decision`. `reason` says why."""

    kind: StepKind
    reason: str
    trials: tuple[TrialKey, ...] = ()
    decision: SearchDecision | None = None
    evidence: tuple[FractionEvidence, ...] = ()


def next_step(spec: SearchSpec, results: Mapping[TrialKey, float]) -> SearchStep:
    """Replay the search over the final accuracies known so far; say what comes next.

    `results` may hold more than the search needs (other seeds, other fractions from an earlier
    search of the same job); only the trials on the search's own path are used.
    """

    def missing(fraction: float) -> tuple[TrialKey, ...]:
        keys = (TrialKey(fraction, seed) for seed in spec.seeds)
        return tuple(k for k in keys if k not in results)

    def accuracies(fraction: float) -> tuple[float, ...]:
        return tuple(float(results[TrialKey(fraction, seed)]) for seed in spec.seeds)

    # The baseline and the first fraction do not depend on each other: ask for both at once,
    # so that a search with room for parallel trials runs them together.
    needed = missing(BASELINE) + missing(spec.start)
    if missing(BASELINE):
        return SearchStep(
            StepKind.RUN,
            f"running the full-BSP baseline (and {format_fraction(spec.start)}, which does "
            "not depend on it)",
            needed,
        )
    baseline = accuracies(BASELINE)
    bsp_mean = _mean(baseline)
    used = spec.repeats
    evidence: list[FractionEvidence] = []
    holding, failing = BASELINE, None  # BSP holds against itself by definition
    current = spec.start

    def decide(stop: StopReason, reason: str) -> SearchStep:
        mean = bsp_mean if holding == BASELINE else _evidence_of(evidence, holding).mean
        decision = SearchDecision(
            fraction=holding,
            stop=stop,
            reason=reason,
            bsp_mean=bsp_mean,
            fraction_mean=mean,
            tolerance_points=spec.tolerance_points,
            repeats=spec.repeats,
            trials_used=used,
            baseline=baseline,
            evidence=tuple(evidence),
        )
        return SearchStep(StepKind.DECIDE, reason, decision=decision, evidence=tuple(evidence))

    while True:
        todo = missing(current)
        if todo:
            if used + spec.repeats > spec.max_trials:
                return decide(
                    StopReason.BUDGET,
                    f"the trial budget ({spec.max_trials}) has no room for "
                    f"{format_fraction(current)} ({spec.repeats} more trials after {used}); "
                    + _holding_text(holding, evidence, bsp_mean, spec),
                )
            return SearchStep(
                StepKind.RUN,
                f"testing BSP fraction {format_fraction(current)}",
                todo,
                evidence=tuple(evidence),
            )
        used += spec.repeats
        values = accuracies(current)
        mean = _mean(values)
        holds = spec.holds(mean, bsp_mean)
        evidence.append(FractionEvidence(current, values, mean, holds, 100 * (bsp_mean - mean)))
        if holds:
            holding = current
        else:
            failing = current
        if failing is None:
            # Halving phase: every fraction so far held.
            following = current / 2
            if following < spec.resolution - 1e-12:
                return decide(
                    StopReason.RESOLUTION,
                    f"every fraction tried held down to {format_fraction(holding)}; halving "
                    f"again would go below the resolution {format_fraction(spec.resolution)}; "
                    + _holding_text(holding, evidence, bsp_mean, spec),
                )
        else:
            if holding - failing <= spec.resolution + 1e-12:
                return decide(
                    StopReason.BRACKET,
                    f"{format_fraction(failing)} fell short "
                    f"({_evidence_of(evidence, failing).below_bsp_points:.2f} points below BSP) "
                    f"and {format_fraction(holding)} is within the resolution "
                    f"{format_fraction(spec.resolution)} of it; "
                    + _holding_text(holding, evidence, bsp_mean, spec),
                )
            following = (holding + failing) / 2
        current = following


def _holding_text(
    holding: float, evidence: list[FractionEvidence], bsp_mean: float, spec: SearchSpec
) -> str:
    repeats = f"mean of {spec.repeats} repeat{'s' if spec.repeats > 1 else ''}"
    if holding == BASELINE:
        return (
            f"no fraction below full BSP stayed within {spec.tolerance_points:g} points of "
            f"BSP's {100 * bsp_mean:.2f}% ({repeats}), so the job stays with BSP"
        )
    mean = _evidence_of(evidence, holding).mean
    return (
        f"the smallest holding fraction is {format_fraction(holding)}: {100 * mean:.2f}% "
        f"against BSP's {100 * bsp_mean:.2f}% ({repeats}, tolerance "
        f"{spec.tolerance_points:g} points)"
    )


def _evidence_of(evidence: list[FractionEvidence], fraction: float) -> FractionEvidence:
    return next(e for e in evidence if e.fraction == fraction)


def _mean(values: tuple[float, ...]) -> float:
    return math.fsum(values) / len(values)


def schedule_for(fraction: float) -> str:
    """The schedule of a trial or decision: BSP for `fraction` of the samples, then ASP."""
    if fraction >= BASELINE:
        return "bsp"
    return f"bsp:{fraction!r},asp"


def format_fraction(fraction: float) -> str:
    """1/8, 3/32, 1 - the search only produces dyadic fractions, which this shows exactly; a
    share an online run chose (0.3582, 0.8768) is shown as the decimal it was stored as."""
    exact = Fraction(fraction).limit_denominator(1 << 20)
    denominator = exact.denominator
    # Only a power of two is a search's: 0.8768 is 548/625, but an online run chose it.
    if denominator > MAX_SHOWN_DENOMINATOR or denominator & (denominator - 1):
        return f"{fraction:.4g}"
    return str(exact.numerator) if exact.denominator == 1 else f"{exact}"


# A search halves down to MIN_RESOLUTION at the finest: its shares have no larger denominator.
MAX_SHOWN_DENOMINATOR = round(1 / MIN_RESOLUTION)


def fraction_label(fraction: float) -> str:
    """A file-name-safe exact form: 0.125, 0.09375, 1."""
    text = repr(float(fraction))
    return text[:-2] if text.endswith(".0") else text
