"""Gradient statistics measured inside a BSP round: sampling noise and drift.

In a BSP round the server holds every worker's gradient before it sums them. Each is a mean
over its worker's batch of b_i samples, so with per-sample gradients of mean G and covariance
Sigma (both slowly changing with the weights), E|g_i|^2 = |G|^2 + tr(Sigma)/b_i, and the round's
sample-weighted mean g (over B = sum b_i samples) has E|g|^2 = |G|^2 + tr(Sigma)/B. Two batch
sizes seen at once are exactly McCandlish et al.'s estimator ("An empirical model of
large-batch training", 2018, appendix A): with n worker gradients,

    tr(Sigma) ~ S = (sum_i b_i |g_i|^2 - B |g|^2) / (n - 1)       (unbiased; = b * sample variance
                                                                    of the g_i when all b_i = b)
    |G|^2     ~ |g|^2 - S / B                                       (unbiased)

and the simple noise scale B_simple = tr(Sigma) / |G|^2, taken as a ratio of smoothed numerator
and denominator as they recommend (each is unbiased, their ratio per round is not).

Drift: how far the mean gradient moves in one BSP update. Two consecutive rounds' means differ
by the true change plus two independent noises, E|g_t - g_{t-1}|^2 = |G_t - G_{t-1}|^2 +
tr(Sigma_t)/B_t + tr(Sigma_{t-1})/B_{t-1}, so subtracting both rounds' S/B leaves an unbiased
estimate of D = |G_t - G_{t-1}|^2 (what a gradient one BSP update stale gets wrong; the timing
rule in switch_timing.py scales it to ASP's staleness).

The shards' side is in `partials` (`RoundPartials`: one round's sums over a slice, which add
up across shards) and `accumulator` (`RoundStatsAccumulator`: a round's gradients in, partials
out); both names are importable from here too. This module is the controller's side:
`GradientStatsEstimator` turns the rounds' summed partials into smoothed signals.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from syncswitch.core.timing.accumulator import RoundStatsAccumulator
from syncswitch.core.timing.partials import RoundPartials, add_partials

__all__ = [
    "ExponentialAverage",
    "GradientSignals",
    "GradientStatsEstimator",
    "RoundEstimate",
    "RoundPartials",
    "RoundStatsAccumulator",
    "add_partials",
]


@dataclass(frozen=True)
class RoundEstimate:
    """One round's unsmoothed estimates (None where the round did not measure them)."""

    version: int
    noise_trace: float | None  # tr(Sigma) of the per-sample gradient
    grad_sq: float | None  # |G|^2
    drift_sq: float | None  # |G_t - G_{t-1}|^2, one BSP update apart


@dataclass(frozen=True)
class GradientSignals:
    """The smoothed signals after some rounds (exponential moving averages, bias-corrected)."""

    version: int  # of the last round taken in
    rounds: int  # rounds whose noise was measured
    workers: int
    samples: int  # B of the last round
    noise_trace: float  # tr(Sigma)
    grad_sq: float  # |G|^2
    drift_sq: float | None  # per BSP update; None until two consecutive rounds were seen
    # The smoothed drift's standard error, from the spread of the rounds' own estimates
    # around it (None until two drifts were seen), and how many rounds measured a drift: a
    # drift of 0 or below is noise-dominated, not "no drift", until this error says so.
    drift_stderr: float | None = None
    drift_rounds: int = 0

    @property
    def noise_scale(self) -> float:
        """B_simple = tr(Sigma) / |G|^2 (inf while |G|^2 is estimated <= 0)."""
        return self.noise_trace / self.grad_sq if self.grad_sq > 0 else math.inf


@dataclass
class ExponentialAverage:
    """An exponential moving average with Adam's start-up bias correction."""

    decay: float
    value: float = 0.0
    weight: float = 0.0  # 1 - decay^k after k values
    square: float = 0.0  # the same average of x^2: the values' spread around the average
    weight_sq: float = 0.0  # the sum of the squared weights: the average's effective count

    def add(self, x: float) -> None:
        self.value = self.decay * self.value + (1.0 - self.decay) * x
        self.square = self.decay * self.square + (1.0 - self.decay) * x * x
        self.weight = self.decay * self.weight + (1.0 - self.decay)
        self.weight_sq = self.decay**2 * self.weight_sq + (1.0 - self.decay) ** 2

    def get(self) -> float | None:
        return self.value / self.weight if self.weight > 0 else None

    def stderr(self) -> float | None:
        """The standard error of `get()`: the values' weighted spread over the effective
        count (weight^2 / weight_sq, Kish's), with the small-sample correction; None until
        two values were taken in. A trend in the values counts as spread (conservative)."""
        if self.weight <= 0 or self.weight_sq <= 0:
            return None
        count = self.weight**2 / self.weight_sq
        if count < 1.5:
            return None
        mean = self.value / self.weight
        spread = max(self.square / self.weight - mean * mean, 0.0) * count / (count - 1.0)
        return math.sqrt(spread / count)


class GradientStatsEstimator:
    """The controller side: rounds' summed partials in, smoothed signals out.

    `half_life_rounds`: how many measured rounds it takes for an old round's weight to halve.
    """

    def __init__(self, half_life_rounds: float = 50.0) -> None:
        if half_life_rounds <= 0:
            raise ValueError(f"half_life_rounds must be > 0, got {half_life_rounds}")
        decay = 0.5 ** (1.0 / half_life_rounds)
        self.half_life_rounds = half_life_rounds
        self._noise = ExponentialAverage(decay)
        self._grad = ExponentialAverage(decay)
        self._drift = ExponentialAverage(decay)
        self._rounds = 0
        self._drift_rounds = 0
        self._last: RoundPartials | None = None
        self._last_noise_per_sample: float | None = None  # S/B of the last round measured
        self._workers = 0

    def add(self, partials: RoundPartials) -> RoundEstimate:
        """Take in one round (all shards' partials added); return its own estimates."""
        n, big_b = partials.workers, partials.samples
        noise = grad = drift = None
        if partials.weighted_sq is not None:
            # E[sum_U b_i |g_i|^2] = B_U |G|^2 + m tr(Sigma) over the measured workers U and
            # E|g|^2 = |G|^2 + tr(Sigma)/B, so the difference below is (m - B_U/B) tr(Sigma);
            # with U all n workers, (n - 1) tr(Sigma).
            m = partials.measured_workers or n
            big_b_u = partials.measured_samples or big_b
            if partials.subset_sq is not None:
                # Around the subset's own mean: E|g_U|^2 = |G|^2 + tr(Sigma)/B_U, so the
                # difference is (m - 1) tr(Sigma), with no |G|^2 left in it.
                noise = (partials.weighted_sq - big_b_u * partials.subset_sq) / (m - 1)
            else:
                spread = m - big_b_u / big_b
                noise = (partials.weighted_sq - big_b_u * partials.mean_sq) / spread
            grad = partials.mean_sq - noise / big_b
            self._noise.add(noise)
            self._grad.add(grad)
            self._rounds += 1
        last = self._last
        after_last = last is not None and last.version == partials.version - 1
        # The previous round's |g_{t-1}|^2 and B: carried in these partials when the shards
        # kept that mean without reporting it, else in that round's own partials.
        previous: tuple[float, int] | None = None
        if partials.previous_sq is not None:
            previous = (partials.previous_sq, partials.previous_samples or big_b)
        elif after_last and last is not None:
            previous = (last.mean_sq, last.samples)
        if partials.cross is not None and previous is not None:
            # The noise of both means is subtracted; a round that did not measure its own
            # noise uses the nearest one measured (the noise changes slowly between rounds).
            here = noise / big_b if noise is not None else self._last_noise_per_sample
            there = None
            if after_last and last is not None and last.weighted_sq is not None:
                there = self._last_noise_per_sample
            elif here is not None:
                there = here * big_b / previous[1]  # S_t / B_{t-1}
            if here is not None and there is not None:
                raw = partials.mean_sq + previous[0] - 2.0 * partials.cross
                drift = raw - here - there
                self._drift.add(drift)
                self._drift_rounds += 1
        if noise is not None:
            self._last_noise_per_sample = noise / big_b
        self._last = partials
        self._workers = n
        return RoundEstimate(partials.version, noise, grad, drift)

    @property
    def signals(self) -> GradientSignals | None:
        noise, grad, last = self._noise.get(), self._grad.get(), self._last
        if noise is None or grad is None or last is None:
            return None
        return GradientSignals(
            version=last.version,
            rounds=self._rounds,
            workers=self._workers,
            samples=last.samples,
            noise_trace=noise,
            grad_sq=grad,
            drift_sq=self._drift.get(),
            drift_stderr=self._drift.stderr(),
            drift_rounds=self._drift_rounds,
        )

    def forget_previous(self) -> None:
        """No drift across the next round (the weights jumped: a rollback, a restore)."""
        self._last = None

    # -- resume: the history a resumed run needs is the EMAs and the last round -----------

    def to_plain(self) -> dict[str, Any]:
        return {
            "half_life_rounds": self.half_life_rounds,
            "noise": [self._noise.value, self._noise.weight],
            "grad": [self._grad.value, self._grad.weight],
            "drift": [self._drift.value, self._drift.weight],
            "drift_spread": [self._drift.square, self._drift.weight_sq],
            "rounds": self._rounds,
            "drift_rounds": self._drift_rounds,
            "workers": self._workers,
            "last": asdict(self._last) if self._last is not None else None,
            "last_noise_per_sample": self._last_noise_per_sample,
        }

    @classmethod
    def from_plain(cls, state: dict[str, Any]) -> GradientStatsEstimator:
        estimator = cls(float(state["half_life_rounds"]))
        emas = {"noise": estimator._noise, "grad": estimator._grad, "drift": estimator._drift}
        for key, ema in emas.items():
            ema.value, ema.weight = (float(x) for x in state[key])
        # Absent from states saved before the drift's error was kept: it restarts at 0.
        square, weight_sq = state.get("drift_spread", (0.0, 0.0))
        estimator._drift.square, estimator._drift.weight_sq = float(square), float(weight_sq)
        estimator._rounds = int(state["rounds"])
        estimator._drift_rounds = int(state.get("drift_rounds", 0))
        estimator._workers = int(state["workers"])
        last = state["last"]
        estimator._last = RoundPartials(**last) if last is not None else None
        noise = state["last_noise_per_sample"]
        estimator._last_noise_per_sample = None if noise is None else float(noise)
        return estimator
