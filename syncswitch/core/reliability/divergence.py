"""Divergence guard: spot a training run going off the rails, and decide how to respond.

`DivergenceGuard` is fed the loss of every applied gradient (UpdateRecord.loss) and reports a
`Divergence` once when

- a loss is NaN or inf (at once: weights that produce one rarely recover by themselves), or
- the loss has risen far above its best level: the median of the last `window` losses
  exceeds both `factor` x the reference and the reference + `min_rise_fraction` x (initial
  level - reference), for `patience` consecutive observations, after `warmup` observations
  since the start or last reset.

The reference is the lowest median of any `reference_window` consecutive losses seen since
the last reset: the best level training has reached. "Best so far" rather than a recent
average, so a slow drift upwards is measured against where the loss was, not against a
reference that drifts along with it. Medians on both sides, so a few huge spikes move
neither (a burst must fill more than half the recent window to count: the recent side
uses the lower median, so 10 spikes in a window of 20 do not move it). The reference window
is long (100 by default) because the minimum over a run of many short-window medians is
biased low by chance; with 100 losses per median that bias is small.

The second condition keeps the ratio test from firing late in training, where per-batch
losses are tiny and wildly variable: in a single-process MNIST-1D run (1-D CNN, batch 32,
lr 0.025, momentum 0.9) the best 100-loss median reached 0.012 while healthy 20-loss medians
later wandered up to 0.17, a 14x "rise" of no consequence. A real divergence gives back a
good part of what was learned, so the rise must also cover `min_rise_fraction` (a quarter)
of the way from the best level back up to the initial level: the median of the first
`reference_window` losses, the untrained loss (about ln(10) = 2.3 nats for 10 classes),
which puts the bar near 0.6 nats in that run. The initial level is the task's loss scale, not
a property of the weights, so `reset()` keeps it, and a resumed run should pass it back in
(`DivergenceGuard(config, initial_level=...)`); otherwise the first losses after the resume
would be taken as "untrained" and only the ratio test would remain.

Losses are assumed non-negative (cross-entropy, MSE). If the initial level is not above the
best (the loss never fell), only the ratio test applies.

After a verdict the guard stays quiet until `reset()`, which the runtime calls once it has
rolled back; the guard then starts over, warmup included, so the losses of the restored
weights are judged afresh. `rollback_decision` is the pure response: roll back and continue
under BSP (optionally with a smaller learning rate and a lower asynchronous momentum), or give
up once `max_rollbacks` have been spent.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.protocol import BSP, ProtocolSpec
from syncswitch.core.sync.records import Action, Decision


class DivergenceKind(StrEnum):
    NON_FINITE_LOSS = "non_finite_loss"
    LOSS_RISE = "loss_rise"


@dataclass(frozen=True)
class GuardConfig:
    # Recent losses whose median is judged. 20 applied gradients: at 8 workers that is 2.5
    # BSP updates or 20 ASP updates; a median needs 11 of them high, so spikes do not count.
    window: int = 20
    # The reference is the lowest median of this many consecutive losses (see module doc).
    reference_window: int = 100
    # Diverged when the recent median > factor x reference ...
    # 3x: while the loss is well above zero, the noise of a 20-loss median is well under 2x,
    # and a run that diverges passes 3x quickly and does not come back.
    factor: float = 3.0
    # ... and > reference + min_rise_fraction x (initial level - reference): a quarter of
    # what was learned given back; see the module docstring for why near-zero losses need it.
    min_rise_fraction: float = 0.25
    # ... or, whatever the ratio, the median has given back this much of what was learned
    # (reference + give_back_fraction x (initial - reference)). A run whose loss only fell
    # from 2.3 to 1.4 and then climbs back to chance never reaches 3x its best level, yet
    # it has diverged: seen with 8 MNIST-1D workers switching to ASP with momentum kept.
    give_back_fraction: float = 0.75
    # Observations since start or reset before the rise test applies: the reference needs a
    # full reference window, and the first steps of training are noisy.
    warmup: int = 100
    # Consecutive observations past the threshold needed for a verdict. 10, not 5: in 100
    # synthetic plateaus of 10,000 losses with lognormal noise sigma=1.0 (heavier than the
    # real runs above show while the loss is still high), 5 gave 75 false verdicts, 10 gave 27
    # with the ratio test alone. A real blow-up still trips fast: on MNIST-1D (as above),
    # raising lr from 0.025 to 0.15 at step 2000 sent the loss to ~2 and tripped 22 losses
    # later; raising it to 0.4 gave NaN, tripped on the 10th loss.
    patience: int = 10

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"guard window {self.window} must be >= 1 loss")
        if self.reference_window < self.window:
            raise ValueError(
                f"guard reference_window {self.reference_window} must be >= the window "
                f"({self.window})"
            )
        if not (math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"guard factor {self.factor} must be a finite number > 1")
        if not (math.isfinite(self.min_rise_fraction) and 0 <= self.min_rise_fraction <= 1):
            raise ValueError(
                f"guard min_rise_fraction {self.min_rise_fraction} must be in [0, 1] (a "
                f"fraction of the way from the best level back to the initial one)"
            )
        if not (
            math.isfinite(self.give_back_fraction)
            and self.min_rise_fraction <= self.give_back_fraction <= 1
        ):
            raise ValueError(
                f"guard give_back_fraction {self.give_back_fraction} must be in "
                f"[min_rise_fraction, 1]"
            )
        if self.warmup < self.reference_window:
            raise ValueError(
                f"guard warmup {self.warmup} must be >= reference_window "
                f"({self.reference_window}), so the reference exists when the test starts"
            )
        if self.patience < 1:
            raise ValueError(f"guard patience {self.patience} must be >= 1")

    def describe(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "reference_window": self.reference_window,
            "factor": self.factor,
            "min_rise_fraction": self.min_rise_fraction,
            "give_back_fraction": self.give_back_fraction,
            "warmup": self.warmup,
            "patience": self.patience,
            "test": (
                "non-finite loss; or median of the last `window` losses > min(max(factor x "
                "reference, reference + min_rise_fraction x learned), reference + "
                "give_back_fraction x learned) for `patience` observations, where learned = "
                "initial - reference, the reference is the lowest median of "
                "`reference_window` consecutive losses since the last reset and initial is "
                "the median of the first `reference_window` losses of the run"
            ),
        }


@dataclass(frozen=True)
class Divergence:
    """The guard's verdict, with the numbers that led to it."""

    kind: DivergenceKind
    reason: str
    loss: float  # the non-finite loss, or the recent median that rose
    reference: float | None  # the best level it rose from (None before one exists)
    progress: float
    time_s: float
    observations: int  # losses seen since the last reset
    # Progress of the last loss seen while the loss still looked healthy (recent median at or
    # below the threshold, or still in warmup); None if there was none. Roll back to a
    # checkpoint taken at or before this point: a later one may hold already-diverging weights.
    healthy_progress: float | None = None

    def to_plain(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "reason": self.reason,
            "loss": self.loss if math.isfinite(self.loss) else str(self.loss),
            "reference": self.reference,
            "progress": round(self.progress, 6),
            "time_s": round(self.time_s, 6),
            "observations": self.observations,
            "healthy_progress": self.healthy_progress,
        }


class DivergenceGuard:
    def __init__(
        self, config: GuardConfig = GuardConfig(), *, initial_level: float | None = None
    ) -> None:
        if initial_level is not None and not (math.isfinite(initial_level) and initial_level >= 0):
            raise ValueError(f"initial loss level {initial_level} must be a finite number >= 0")
        self._config = config
        self._initial = initial_level
        self.reset()

    @property
    def config(self) -> GuardConfig:
        return self._config

    @property
    def tripped(self) -> Divergence | None:
        """The verdict given since the last reset, if any."""
        return self._verdict

    @property
    def reference(self) -> float | None:
        return self._reference

    @property
    def initial_level(self) -> float | None:
        """The untrained loss level (store it in checkpoints; pass it back on resume)."""
        return self._initial

    @property
    def observations(self) -> int:
        return self._count

    def reset(self) -> None:
        """Start over (after a rollback): empty windows, no reference, warmup again.

        The initial level is kept: it is the loss scale of the task, not of the weights.
        """
        self._recent: deque[float] = deque(maxlen=self._config.window)
        self._long: deque[float] = deque(maxlen=self._config.reference_window)
        self._reference: float | None = None
        self._count = 0
        self._streak = 0
        self._verdict: Divergence | None = None
        self._healthy_progress: float | None = None

    def threshold(self) -> float | None:
        """The recent median above which the loss counts as risen (None before a reference)."""
        if self._reference is None:
            return None
        cfg = self._config
        learned = max((self._initial or 0.0) - self._reference, 0.0)
        risen = max(cfg.factor * self._reference, self._reference + cfg.min_rise_fraction * learned)
        # Only once the loss has clearly fallen (to 3/4 of the initial level or below): after a
        # rollback the restored weights may sit near the initial level, where a small "give
        # back" is noise.
        if self._reference > 0.75 * (self._initial or 0.0):
            return risen
        return min(risen, self._reference + cfg.give_back_fraction * learned)

    def observe(self, loss: float, *, progress: float, time_s: float) -> Divergence | None:
        """One applied gradient's loss; returns a verdict the first time divergence is seen."""
        if self._verdict is not None:
            return None
        self._count += 1
        loss = float(loss)
        if not math.isfinite(loss):
            return self._trip(
                DivergenceKind.NON_FINITE_LOSS,
                f"non-finite training loss {loss} after {self._count} losses",
                loss,
                progress,
                time_s,
            )
        cfg = self._config
        self._recent.append(loss)
        self._long.append(loss)
        if len(self._long) == cfg.reference_window:
            level = statistics.median(self._long)
            if self._initial is None:
                self._initial = level
            if self._reference is None or level < self._reference:
                self._reference = level
        threshold = self.threshold()
        if self._count < cfg.warmup or threshold is None:
            self._healthy_progress = progress
            return None
        # The lower median: with an even window, half the losses high is not yet "most".
        recent = statistics.median_low(self._recent)
        if recent <= threshold:
            self._streak = 0
            self._healthy_progress = progress
            return None
        self._streak += 1
        if self._streak < cfg.patience:
            return None
        reference = self._reference
        assert reference is not None  # threshold() returned a number
        ratio = f"{recent / reference:.1f}x" if reference > 0 else "far above"
        return self._trip(
            DivergenceKind.LOSS_RISE,
            (
                f"training loss diverged: median of the last {cfg.window} losses {recent:.4g} "
                f"is {ratio} the best level {reference:.4g} (threshold {threshold:.4g}) for "
                f"{cfg.patience} losses in a row"
            ),
            recent,
            progress,
            time_s,
        )

    def _trip(
        self, kind: DivergenceKind, reason: str, loss: float, progress: float, time_s: float
    ) -> Divergence:
        self._verdict = Divergence(
            kind=kind,
            reason=reason,
            loss=loss,
            reference=self._reference,
            progress=progress,
            time_s=time_s,
            observations=self._count,
            healthy_progress=self._healthy_progress,
        )
        return self._verdict


# -- the response ----------------------------------------------------------------------------

# From most to least momentum in an asynchronous phase: KEEP uses m, RAMP climbs from m/n back
# to m, SCALE stays at m/n, ZERO uses none. "lower" moves one step down this ladder.
MOMENTUM_LADDER = (
    MomentumPolicy.KEEP,
    MomentumPolicy.RAMP,
    MomentumPolicy.SCALE,
    MomentumPolicy.ZERO,
)
_MOMENTUM_CHOICES = ("unchanged", "lower", *(p.value for p in MomentumPolicy))


@dataclass(frozen=True)
class RollbackConfig:
    # Rollbacks allowed in one run; the next divergence gives up.
    max_rollbacks: int = 2
    # Multiplies the learning-rate scale at each rollback. Below 1 by default: a BSP run is
    # bit-for-bit reproducible, so one that diverged under BSP and is rolled back to BSP with
    # the same learning rate would diverge again at the same step.
    lr_factor: float = 0.5
    # Asynchronous momentum after a rollback: "unchanged", "lower" (one step down
    # MOMENTUM_LADDER), or a MomentumPolicy value to use from then on. It matters only if the
    # run leaves BSP again later.
    momentum: str = "unchanged"

    def __post_init__(self) -> None:
        if type(self.max_rollbacks) is not int or self.max_rollbacks < 0:
            raise ValueError(f"max_rollbacks {self.max_rollbacks!r} must be an int >= 0")
        if not (math.isfinite(self.lr_factor) and 0 < self.lr_factor <= 1):
            raise ValueError(f"rollback lr_factor {self.lr_factor} must be in (0, 1]")
        if self.momentum not in _MOMENTUM_CHOICES:
            raise ValueError(
                f"rollback momentum {self.momentum!r} must be one of {', '.join(_MOMENTUM_CHOICES)}"
            )


@dataclass(frozen=True)
class Rollback:
    """Decision: restore the last good checkpoint, then continue under `protocol`."""

    reason: str
    verdict: Divergence
    number: int  # 1 for the first rollback of the run
    lr_scale: float  # multiply the scheduled learning rate by this from now on
    momentum: MomentumPolicy  # asynchronous momentum policy from now on
    protocol: ProtocolSpec = BSP

    def to_decision(self) -> Decision:
        return Decision(
            action=Action.ROLLBACK,
            policy="divergence_guard",
            reason=self.reason,
            time_s=self.verdict.time_s,
            progress=self.verdict.progress,
            protocol=self.protocol,
        )


@dataclass(frozen=True)
class GiveUp:
    """Decision: stop the run as diverged; rolling back again is not allowed."""

    reason: str
    verdict: Divergence
    rollbacks_done: int

    def to_decision(self) -> Decision:
        return Decision(
            action=Action.GIVE_UP,
            policy="divergence_guard",
            reason=self.reason,
            time_s=self.verdict.time_s,
            progress=self.verdict.progress,
        )


def lower_momentum(policy: MomentumPolicy) -> MomentumPolicy:
    """One step down MOMENTUM_LADDER (ZERO stays ZERO); RESET has KEEP's momentum."""
    index = MOMENTUM_LADDER.index(MomentumPolicy.KEEP if policy is MomentumPolicy.RESET else policy)
    return MOMENTUM_LADDER[min(index + 1, len(MOMENTUM_LADDER) - 1)]


def rollback_decision(
    verdict: Divergence,
    current_lr_scale: float,
    current_momentum_policy: MomentumPolicy,
    config: RollbackConfig = RollbackConfig(),
    *,
    rollbacks_done: int = 0,
) -> Rollback | GiveUp:
    """How to respond to `verdict`, given what earlier rollbacks already changed."""
    if not (math.isfinite(current_lr_scale) and current_lr_scale > 0):
        raise ValueError(f"current lr scale {current_lr_scale} must be a finite number > 0")
    if rollbacks_done < 0:
        raise ValueError(f"rollbacks_done {rollbacks_done} must be >= 0")
    current_momentum_policy = MomentumPolicy(current_momentum_policy)
    if rollbacks_done >= config.max_rollbacks:
        return GiveUp(
            reason=(
                f"{verdict.reason}; giving up: {rollbacks_done} rollbacks done, limit "
                f"{config.max_rollbacks}"
            ),
            verdict=verdict,
            rollbacks_done=rollbacks_done,
        )
    lr_scale = current_lr_scale * config.lr_factor
    if config.momentum == "unchanged":
        momentum = current_momentum_policy
    elif config.momentum == "lower":
        momentum = lower_momentum(current_momentum_policy)
    else:
        momentum = MomentumPolicy(config.momentum)
    changes = [f"learning rate x{lr_scale:g} of the schedule"]
    if momentum is not current_momentum_policy:
        changes.append(f"async momentum {momentum} (was {current_momentum_policy})")
    number = rollbacks_done + 1
    return Rollback(
        reason=(
            f"{verdict.reason}; rolling back to the last good checkpoint and continuing under "
            f"BSP with {', '.join(changes)} (rollback {number} of at most "
            f"{config.max_rollbacks})"
        ),
        verdict=verdict,
        number=number,
        lr_scale=lr_scale,
        momentum=momentum,
    )
