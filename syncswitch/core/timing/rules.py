"""When to leave BSP: decision rules over the signals a run measures (issue 21).

Each rule reads a history of signals and answers with an `OnlineSwitchDecision`: switch now or
not yet, why, and the values that led to it. Rules never act; the run controller carries a
switch out on every shard. `decide` adds the floor and the ceiling on the BSP share.

The rules:

- `LossPlateauRule` (the paper's online attempt, the baseline): switch when a loss (the
  evaluator's validation loss, or the workers' training loss) improved by less than
  `min_improvement`, relative, over the last `window` of training progress.

- `StalenessNoiseRule` (the default): switch when the error that staleness would
  add to an ASP gradient falls below a fraction of the sampling noise that gradient carries
  anyway. Derivation. Under ASP with n workers a gradient is applied about n - 1 updates after
  the weights it was computed on. Its error against the fresh gradient G(w_t) has two parts:
  sampling noise, E|noise|^2 = tr(Sigma)/b for a worker batch b, and the staleness bias
  |G(w_{t-tau}) - G(w_t)|^2. BSP measures the second per update: D = |G_t - G_{t-1}|^2
  (gradient_stats.py). Over k updates the bias grows like k^2 D if consecutive changes of the
  gradient point the same way (a steady rotation), like k D if they are uncorrelated (a random
  walk). On the simulated scale study the drift over 2 BSP updates is about 2.2 D for most of
  training (benchmarks/results/online-timing-study.md): the random walk. So the staleness
  error is taken as (n - 1) D, in units of one BSP update's movement: ASP's updates are n
  times smaller in lr, but asynchrony adds an implicit momentum of about 1 - 1/n, so over
  n - 1 gradients its weights move about as far as BSP's in one update; the constant is left
  to the threshold. The ratio

      r = (n - 1)^p * D / (tr(Sigma) / b),   p = `staleness_exponent` (default 1/2)

  is large early (the gradient changes faster than the noise hides) and falls as training
  settles. The rule switches once r has been above `threshold` and then stays below it for
  `patience` consecutive checks; requiring it to have been above first keeps the first rounds
  (a flat start: tiny gradients, tiny drift) from triggering a switch.
  Why the default exponent is 1/2, not 1: the drift over k updates grows like k only for
  the first few updates and saturates near 2|G|^2 after 4-8 (the gradient forgets its past),
  so (n - 1) D overstates the error more the more workers there are; with p = 1 the rule
  switched later than the smallest share that holds at 16 and 32 workers (1.08x and 1.07x
  its time). A saturating form, min((n - 1) D, 2|G|^2), switched far too early at 32 and 64
  workers: some growth with n is needed (ASP with more workers is also less stable). p = 1/2
  lies between; it was chosen by replay on recorded signals of one job
  (benchmarks/results/online-timing-study.md).
  Two conditions make a check count as below (issue 33; benchmarks/results/
  online-transfer-study.md), so that the rule holds on jobs it was not tuned on:
  * Confidence. D is a difference of noisy quantities; after few measured rounds its
    smoothed value can be far off, even below 0 (read as r = 0, it once ended BSP on another
    job). A check counts as below only when r computed with D at its upper confidence bound,
    D + `confidence` standard errors (the spread of the rounds' own estimates,
    gradient_stats.py), is below `threshold`, and only after `min_drift_rounds` measured
    drifts. The threshold (0.25) now applies to that bound: on the scale study's recordings
    it leaves BSP within 0.03 of the samples of where 0.15 on the estimate did (0.3 left up
    to 0.08 earlier at 16 and 32 workers, where leaving early costs most).
  * Noise-dominated. The comparison of staleness with sampling noise only says ASP costs
    little once the noise is what the updates mostly carry. While the true gradient is
    larger than the noise of BSP's own averaged gradient, |G|^2 > tr(Sigma) / (n b) (a noise
    scale B_simple below the global batch: the run is still descending a slope, and a stale
    gradient overshoots it whatever the noise), the check does not count. `min_noise_scale`
    1 is that boundary itself, McCandlish et al.'s critical batch, not a tuned value. The
    regression and sequence examples' jobs stay below it nearly all run (their BSP curves are
    still steep at the end, and any ASP tail costs them); the scale study crosses it about
    where its staleness ratio falls.
  Arming (r at or above the threshold once) reads the estimate itself.

- `NoiseScaleRule`: switch once the simple noise scale B_simple = tr(Sigma)/|G|^2 exceeds
  `threshold` times BSP's global batch n b. Where consecutive gradients are uncorrelated
  (D ~ 2|G|^2) this is the staleness rule with D replaced by its bound, so the two agree; it
  needs no drift estimate, but ignores how fast the gradient actually moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from typing import Protocol as TypingProtocol

from syncswitch.core.timing.gradient_stats import GradientSignals
from syncswitch.records.switch import rule_name

# The policy name a timing decision carries (core.sync.records.Decision.policy).
TIMING_POLICY = "online_timing"


class TimingReason(StrEnum):
    BEFORE_FLOOR = "before_floor"  # not yet: the BSP share's floor is not reached
    NO_SIGNAL = "no_signal"  # not yet: too few measurements to judge
    WAITING = "waiting"  # not yet: the signal says stay with BSP
    UNCERTAIN = "uncertain"  # not yet: below on the estimate, which cannot tell yet
    DESCENDING = "descending"  # not yet: below, but the gradient still dominates its noise
    SIGNAL = "signal"  # switch: the rule fired
    MESSAGE_COST = "message_cost"  # switch: a message costs 2+ steps (a local phase)
    CEILING = "ceiling"  # switch: the BSP share's ceiling is reached, whatever the signal


@dataclass(frozen=True)
class OnlineSwitchDecision:
    """Switch now or not yet, with the reason and the values that led to it."""

    switch: bool
    reason: TimingReason
    rule: str
    progress: float
    values: Mapping[str, float] = field(default_factory=dict)

    def to_plain(self) -> dict[str, Any]:
        return {
            "switch": self.switch,
            "reason": self.reason.value,
            "rule": self.rule,
            "progress": self.progress,
            "values": dict(self.values),
        }

    @classmethod
    def from_plain(cls, record: dict[str, Any]) -> OnlineSwitchDecision:
        """Back from `to_plain()` (a checkpointed run record); raises on a malformed one."""
        return cls(
            switch=bool(record["switch"]),
            reason=TimingReason(record["reason"]),
            rule=rule_name(str(record["rule"])),
            progress=float(record["progress"]),
            values={str(k): float(v) for k, v in record["values"].items()},
        )

    def describe(self) -> str:
        shown = ", ".join(f"{k} {_fmt(v)}" for k, v in self.values.items())
        detail = f"; {shown}" if shown else ""
        if self.reason is TimingReason.CEILING:
            # The shards ended the phase at the ceiling on their own; this check came after.
            return f"switch at the ceiling (seen at {self.progress:.3f}; {self.rule}{detail})"
        verb = "switch" if self.switch else "stay"
        return f"{verb} at {self.progress:.3f} ({self.rule}: {self.reason}{detail})"


def _fmt(value: float) -> str:
    return f"{value:.4g}"


@dataclass(frozen=True)
class GradientPoint:
    """The smoothed gradient statistics at one BSP round (see gradient_stats.py)."""

    progress: float
    workers: int
    worker_batch: float  # samples per worker gradient (B / n)
    noise_trace: float  # tr(Sigma)
    grad_sq: float  # |G|^2
    drift_sq: float | None  # |G_t - G_{t-1}|^2 per BSP update
    drift_stderr: float | None = None  # the drift's standard error (None: not yet known)
    drift_rounds: int = 0  # rounds that measured a drift

    @classmethod
    def from_signals(cls, progress: float, signals: GradientSignals) -> GradientPoint:
        return cls(
            progress=progress,
            workers=signals.workers,
            worker_batch=signals.samples / signals.workers,
            noise_trace=signals.noise_trace,
            grad_sq=signals.grad_sq,
            drift_sq=signals.drift_sq,
            drift_stderr=signals.drift_stderr,
            drift_rounds=signals.drift_rounds,
        )


@dataclass(frozen=True)
class LossPoint:
    progress: float
    loss: float


@dataclass(frozen=True)
class ShareBounds:
    """The BSP share never below `floor` (the first updates are the ones ASP hurts most, and
    the signals need rounds to settle) and never above `ceiling` (past it, BSP is kept
    anyway and the run only pays its time)."""

    floor: float = 1 / 16
    ceiling: float = 7 / 8

    def __post_init__(self) -> None:
        if not 0.0 <= self.floor <= self.ceiling <= 1.0:
            raise ValueError(
                f"share bounds need 0 <= floor <= ceiling <= 1, got {self.floor}, {self.ceiling}"
            )


@dataclass(frozen=True)
class Verdict:
    """A rule's answer before the bounds: fired or not, and its values."""

    fired: bool
    values: Mapping[str, float]
    enough: bool = True  # False: too little history to judge
    # Why a rule below its threshold on the estimate does not count it (UNCERTAIN or
    # DESCENDING), for the decision's reason; None: nothing held back.
    held: TimingReason | None = None


class Rule(TypingProtocol):
    @property
    def name(self) -> str: ...

    # A rule reads GradientPoints or LossPoints (uses_losses says which), hence Any here.
    def check(self, history: Sequence[Any]) -> Verdict: ...


@dataclass(frozen=True)
class LossPlateauRule:
    window: float = 0.1  # progress over which the improvement is measured
    min_improvement: float = 0.05  # relative: (loss then - loss now) / loss then
    name: str = "plateau"

    def check(self, history: Sequence[LossPoint]) -> Verdict:
        if not history:
            return Verdict(False, {}, enough=False)
        now = history[-1]
        earlier = [p for p in history if p.progress <= now.progress - self.window + 1e-12]
        if not earlier:
            return Verdict(False, {"loss": now.loss}, enough=False)
        then = earlier[-1]
        improvement = (then.loss - now.loss) / abs(then.loss) if then.loss else 0.0
        values = {
            "loss": now.loss,
            "loss_window_ago": then.loss,
            "improvement": improvement,
            "threshold": self.min_improvement,
        }
        return Verdict(improvement < self.min_improvement, values)


def staleness_ratio(point: GradientPoint, exponent: float = 1.0) -> float | None:
    """(n - 1)^p D / (tr(Sigma) / b): the staleness error an ASP gradient would carry, over
    its sampling noise (see the module docstring). None without a drift or a noise."""
    if point.drift_sq is None or point.noise_trace <= 0:
        return None
    stale = float((point.workers - 1) ** exponent) * max(point.drift_sq, 0.0)
    return stale / (point.noise_trace / point.worker_batch)


@dataclass(frozen=True)
class _FallingBelow:
    """Fires once a value has been at or above `threshold` and then stays below it for
    `patience` consecutive points (a rising signal fires on the mirror image)."""

    threshold: float
    patience: int
    falling: bool = True

    def fired(self, values: Sequence[float]) -> bool:
        armed, below = False, 0
        for value in values:
            on_bsp_side = value >= self.threshold if self.falling else value <= self.threshold
            if on_bsp_side:
                armed, below = True, 0
            elif armed:
                below += 1
        return armed and below >= self.patience


@dataclass(frozen=True)
class StalenessNoiseRule:
    # The exponent chosen on the simulated scale study (online-timing-study.md, "Third
    # round"); the threshold, now on the drift's upper bound, on that job's recordings
    # (online-transfer-study.md).
    threshold: float = 0.25
    staleness_exponent: float = 0.5
    patience: int = 3  # consecutive points below the threshold
    # A check counts as below only when the ratio's upper confidence bound is: the smoothed
    # drift plus `confidence` standard errors, after `min_drift_rounds` measured drifts
    # (benchmarks/results/online-transfer-study.md).
    confidence: float = 2.0
    min_drift_rounds: int = 8
    # ... and only while the gradient is noise-dominated at BSP's global batch: its noise
    # scale at least this multiple of n b (see the module docstring).
    min_noise_scale: float = 1.0
    name: str = "staleness"

    def check(self, history: Sequence[GradientPoint]) -> Verdict:
        exponent = self.staleness_exponent
        judged = [
            (r, self.upper_ratio(p) if self.noise_dominated(p) else None)
            for p in history
            if (r := staleness_ratio(p, exponent)) is not None
        ]
        if not judged:
            return Verdict(False, {}, enough=False)
        last = history[-1]
        ratio, upper = judged[-1]
        values = {
            "staleness_ratio": ratio,
            "staleness_ratio_upper": upper if upper is not None else math.nan,
            "threshold": self.threshold,
            "drift_sq": last.drift_sq if last.drift_sq is not None else math.nan,
            "drift_stderr": last.drift_stderr if last.drift_stderr is not None else math.nan,
            "noise_trace": last.noise_trace,
            "noise_scale": _noise_scale(last),
            "noise_scale_over_batch": _noise_scale(last) / (last.workers * last.worker_batch),
        }
        fired = _fell_below_surely(judged, self.threshold, self.patience)
        held = None
        if not fired and ratio < self.threshold:
            if not self.noise_dominated(last):
                held = TimingReason.DESCENDING
            elif upper is None or upper >= self.threshold:
                held = TimingReason.UNCERTAIN  # below on the estimate, not on its bound
        return Verdict(fired, values, held=held)

    def noise_dominated(self, point: GradientPoint) -> bool:
        """Whether |G|^2 is at most the noise of BSP's averaged gradient, tr(Sigma) / (n b),
        over `min_noise_scale`: the run has reached the noise, not still descending a slope
        a stale gradient would overshoot (a |G|^2 estimated at 0 or below is noise too)."""
        batch = point.workers * point.worker_batch
        return _noise_scale(point) >= self.min_noise_scale * batch

    def upper_ratio(self, point: GradientPoint) -> float | None:
        """The ratio with the drift at its upper confidence bound; None while the drift's
        error is unknown or rests on fewer than `min_drift_rounds` measured drifts (a
        negative, noise-dominated drift after a few rounds is no evidence of a slow one)."""
        if (
            point.drift_sq is None
            or (point.drift_stderr is None and self.confidence > 0)
            or point.drift_rounds < self.min_drift_rounds
            or point.noise_trace <= 0
        ):
            return None
        error = self.confidence * point.drift_stderr if point.drift_stderr is not None else 0.0
        high = max(point.drift_sq + error, 0.0)
        stale = float((point.workers - 1) ** self.staleness_exponent) * high
        return stale / (point.noise_trace / point.worker_batch)


def _fell_below_surely(
    judged: Sequence[tuple[float, float | None]], threshold: float, patience: int
) -> bool:
    """`_FallingBelow` with confidence: the estimate at or above `threshold` arms it; a point
    counts as below only when its upper bound is below; any other point breaks the run."""
    armed, below = False, 0
    for ratio, upper in judged:
        if ratio >= threshold:
            armed, below = True, 0
        elif upper is not None and upper < threshold:
            below += 1 if armed else 0
        else:
            below = 0
    return armed and below >= patience


def _noise_scale(point: GradientPoint) -> float:
    return point.noise_trace / point.grad_sq if point.grad_sq > 0 else math.inf


@dataclass(frozen=True)
class NoiseScaleRule:
    threshold: float = 2.0  # B_simple over BSP's global batch n b
    patience: int = 3
    name: str = "noise-scale"

    def check(self, history: Sequence[GradientPoint]) -> Verdict:
        if not history:
            return Verdict(False, {}, enough=False)
        relative = [_noise_scale(p) / (p.workers * p.worker_batch) for p in history]
        last = history[-1]
        values = {
            "noise_scale_over_batch": relative[-1],
            "threshold": self.threshold,
            "noise_scale": _noise_scale(last),
        }
        fired = _FallingBelow(self.threshold, self.patience, falling=False).fired(relative)
        return Verdict(fired, values)


def decide(
    rule: Rule, history: Sequence[Any], progress: float, bounds: ShareBounds
) -> OnlineSwitchDecision:
    """Whether to leave BSP at `progress`, by `rule` over `history`, within `bounds`."""
    verdict = rule.check(history)
    if progress >= bounds.ceiling:
        return OnlineSwitchDecision(True, TimingReason.CEILING, rule.name, progress, verdict.values)
    if progress < bounds.floor:
        reason = TimingReason.BEFORE_FLOOR
    elif not verdict.enough:
        reason = TimingReason.NO_SIGNAL
    elif verdict.fired:
        return OnlineSwitchDecision(True, TimingReason.SIGNAL, rule.name, progress, verdict.values)
    else:
        reason = verdict.held or TimingReason.WAITING
    return OnlineSwitchDecision(False, reason, rule.name, progress, verdict.values)


def first_switch(
    rule: Rule, history: Sequence[Any], bounds: ShareBounds
) -> OnlineSwitchDecision | None:
    """Replay a recorded history point by point: the first decision to switch (or None).

    What a run would have decided, had it checked after every point (used offline to tune a
    rule on recorded BSP signals)."""
    for end in range(1, len(history) + 1):
        decision = decide(rule, history[:end], history[end - 1].progress, bounds)
        if decision.switch:
            return decision
    return None


# The rules by the name `--switch-rule` gives them, and the value each compares with its
# threshold (the signal a report plots against the threshold).
RULE_NAMES = ("staleness", "noise-scale", "plateau")
SIGNAL_KEYS = {
    "staleness": "staleness_ratio",
    "noise-scale": "noise_scale_over_batch",
    "plateau": "improvement",
}


def make_rule(name: str, threshold: float | None = None) -> Rule:
    """The rule `--switch-rule NAME` names, with its own threshold unless one is given."""
    if name == "staleness":
        return StalenessNoiseRule() if threshold is None else StalenessNoiseRule(threshold)
    if name == "noise-scale":
        return NoiseScaleRule() if threshold is None else NoiseScaleRule(threshold)
    if name == "plateau":
        if threshold is None:
            return LossPlateauRule()
        return LossPlateauRule(min_improvement=threshold)
    raise ValueError(f"unknown switch rule {name!r}; choose one of {', '.join(RULE_NAMES)}")


def rule_threshold(rule: Rule) -> float:
    """The number a rule compares its signal with."""
    if isinstance(rule, LossPlateauRule):
        return rule.min_improvement
    assert isinstance(rule, StalenessNoiseRule | NoiseScaleRule)
    return rule.threshold


def uses_losses(rule: Rule) -> bool:
    """Whether a rule reads the evaluator's losses (else the shards' gradient statistics)."""
    return isinstance(rule, LossPlateauRule)
