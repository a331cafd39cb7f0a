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

Sharding: every quantity is a sum over coordinates (|g_i|^2, |g|^2 and <g_t, g_{t-1}> over a
shard's slice), so each shard reports its slice's partial sums (`RoundPartials`, which add
with `+`) and whoever holds all shards' partials for a round (the run controller) adds them
and feeds the sum to one `GradientStatsEstimator`. Only scalars cross processes.

Cost: a shard keeps the last round's mean over its slice and, on a measured round, takes three
dot products of the two means; the workers' abs(g_i)^2 come from the admission check, whose one
reduction over each arriving gradient is its dot with itself on such a round (core/sync/admission.py
`check_gradient`), so the statistics make no pass over the workers' gradients of their own.
Where that cannot serve (a subset of workers or coordinates) they take the norm of a block of
`workers` consecutive rows instead (`observe_rows`, the synchronizer's form: a handful of torch
calls whatever n is). That is done every `every`-th round (in pairs: the round before a
measured one only keeps its mean, so the drift is still between consecutive updates),
optionally on a fixed random subset of coordinates (`coordinates`), scaled up by the number of
coordinates, which keeps the sums unbiased. A subset of m workers estimates the noise around
its own mean g_U (over B_U samples): E[sum_U b_i |g_i|^2] - B_U E|g_U|^2 = (m - 1) tr(Sigma),
with no |G|^2 left in the difference (around the whole round's mean the subset's <G, noise>
terms would not cancel, and their variance grows with |G|^2). `observe`, on the gradients
themselves, is the reference form the oracle tests compare with (it also takes a strided
subset, `stride`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class RoundPartials:
    """One BSP round's sums over one shard's slice (or, added up, over all coordinates).

    `version` is the version the round's update produced, so shards' partials for the same
    round are recognised and a drift is only taken between consecutive updates. Sums are over
    the coordinates measured, already scaled to the slice's full size when subsampled.
    """

    version: int
    workers: int  # n: gradients in the round
    samples: int  # B: samples in the round (sum of the workers' batches)
    weighted_sq: float | None  # sum_i b_i |g_i|^2 over the measured workers; None on a
    # round that only keeps its mean
    mean_sq: float  # |g|^2 of the round's sample-weighted mean (of all its workers)
    cross: float | None  # <g_t, g_{t-1}> when the previous round was version - 1, else None
    measured_workers: int = 0  # m: workers in weighted_sq (0: all n)
    measured_samples: int = 0  # B_U: their samples (0: all B)
    # |g_{t-1}|^2 of the previous round's mean and that round's B, when the shard kept that
    # mean without reporting its round (`observe_rows` with `every` > 1); else the previous
    # round's own partials carry them.
    previous_sq: float | None = None
    previous_samples: int = 0
    # |g_U|^2 of the measured workers' own sample-weighted mean, when a subset was measured by
    # `observe_rows`: the noise is then taken around it, which cancels |G|^2 exactly (around
    # the whole round's mean, a subset's <G, noise> terms do not cancel, and their variance
    # grows with |G|^2, large early in training).
    subset_sq: float | None = None

    def __add__(self, other: RoundPartials) -> RoundPartials:
        if (
            self.version,
            self.workers,
            self.samples,
            self.measured_workers,
            self.previous_samples,
        ) != (
            other.version,
            other.workers,
            other.samples,
            other.measured_workers,
            other.previous_samples,
        ):
            raise ValueError(
                f"partials of different rounds: version/workers/samples "
                f"{self.version}/{self.workers}/{self.samples} and "
                f"{other.version}/{other.workers}/{other.samples}"
            )
        return RoundPartials(
            version=self.version,
            workers=self.workers,
            samples=self.samples,
            weighted_sq=_add_optional(self.weighted_sq, other.weighted_sq),
            mean_sq=self.mean_sq + other.mean_sq,
            cross=_add_optional(self.cross, other.cross),
            measured_workers=self.measured_workers,
            measured_samples=self.measured_samples,
            previous_sq=_add_optional(self.previous_sq, other.previous_sq),
            previous_samples=self.previous_samples,
            subset_sq=_add_optional(self.subset_sq, other.subset_sq),
        )


def _add_optional(a: float | None, b: float | None) -> float | None:
    # A quantity one shard did not measure is not measured for the round.
    return None if a is None or b is None else a + b


def add_partials(partials: Sequence[RoundPartials]) -> RoundPartials:
    """All shards' partials of one round, summed."""
    if not partials:
        raise ValueError("no partials to add")
    total = partials[0]
    for part in partials[1:]:
        total = total + part
    return total


class RoundStatsAccumulator:
    """The shard side: turns a BSP round's gradients into `RoundPartials`.

    Holds the previous measured mean over this shard's (strided) slice (`observe`), or the
    last two means (`observe_rows`).
    """

    def __init__(
        self,
        numel: int,
        *,
        every: int = 1,
        stride: int = 1,
        workers: int = 0,
        coordinates: int = 0,
        seed: int = 0,
    ) -> None:
        """`every`: measure one round in this many (in pairs); `stride`: every stride-th
        coordinate only; `workers`: the squared norms of this many workers' gradients only
        (0: all), a subset that rotates with the version so every worker takes its turn;
        `coordinates`: `observe_rows` measures a fixed random subset of this many coordinates
        (0: all), drawn once from `seed` so that every round sees the same ones."""
        if numel < 1:
            raise ValueError(f"numel must be >= 1, got {numel}")
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        if stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}")
        if workers < 0 or workers == 1:
            raise ValueError(f"workers must be 0 (all) or >= 2, got {workers}")
        if coordinates < 0:
            raise ValueError(f"coordinates must be >= 0, got {coordinates}")
        self.workers = workers
        self.every = every
        self._index: torch.Tensor | None = None
        self._factors: tuple[tuple[int, ...], torch.Tensor] | None = None  # (samples, B^2/b_i)
        # A subset saves little unless it is much smaller than the slice (gathering it costs
        # a pass of its own): under half the slice, else every coordinate is measured.
        if 0 < coordinates <= numel // 2:
            self._index = _random_coordinates(numel, coordinates, seed)
        self.stride = min(stride, numel)
        measured = len(range(0, numel, self.stride)) if self._index is None else len(self._index)
        self._scale = numel / measured  # sums over the subset, scaled to the whole slice
        self._previous = torch.zeros(measured)
        self._previous_version: int | None = None
        # observe_rows: the last round's (version, mean over the measured coordinates, B), the
        # mean held by reference: a copy and a matrix product over the pair cost twice the
        # three dot products on the rounds' own tensors inside a loaded round (cold BLAS
        # code; docs/performance.md).
        self._kept: tuple[int, torch.Tensor, int] | None = None
        # Worker norms are taken as given (observe_rows' `squares`) only where the sums are
        # over every coordinate of every worker: a subset's squares would mix with the whole.
        self._takes_squares = self._index is None and self.stride == 1 and workers == 0

    def wants(self, version: int) -> bool:
        """Whether the round producing `version` is used (the caller may skip the work)."""
        phase = version % self.every
        return phase == 0 or phase == self.every - 1

    def needs_squares(self, version: int) -> bool:
        """Whether `observe_rows` would use the squared norms of the round producing `version`
        (`squares`): a measured round, with every worker and every coordinate taken."""
        return self._takes_squares and version % self.every == 0

    def observe(
        self,
        version: int,
        values: Sequence[torch.Tensor],
        samples: Sequence[int],
        mean: torch.Tensor,
    ) -> RoundPartials | None:
        """One round's gradients (flat, this shard's slice) and their sample-weighted mean.

        `version` is the version the round's update produces. Returns None on rounds not
        measured (see `every`); a round just before a measured one keeps its mean only.
        """
        if len(values) < 2 or len(values) != len(samples):
            raise ValueError("a round needs two or more gradients, each with its sample count")
        if not self.wants(version):
            return None
        mean_view = self._view(mean)
        self._follow_dtype(mean_view)
        mean_sq = float(torch.dot(mean_view, mean_view)) * self._scale
        cross = None
        if self._previous_version == version - 1:
            cross = float(torch.dot(mean_view, self._previous)) * self._scale
        weighted_sq = None
        n = len(values)
        chosen: Sequence[int] = range(n)
        if 0 < self.workers < n:
            start = (version // max(self.every, 1)) * self.workers
            chosen = sorted((start + j) % n for j in range(self.workers))
        measured_samples = int(sum(samples[i] for i in chosen))
        if version % self.every == 0:
            weighted_sq = self._scale * sum(samples[i] * self._square(values[i]) for i in chosen)
        self._previous.copy_(mean_view)
        self._previous_version = version
        return RoundPartials(
            version=version,
            workers=len(values),
            samples=int(sum(samples)),
            weighted_sq=weighted_sq,
            mean_sq=mean_sq,
            cross=cross,
            measured_workers=len(chosen),
            measured_samples=measured_samples,
        )

    def observe_rows(
        self,
        version: int,
        rows: torch.Tensor,
        samples: Sequence[int],
        mean: torch.Tensor,
        *,
        squares: Sequence[float | None] | None = None,
    ) -> RoundPartials | None:
        """The synchronizer's form: `rows` are the gradients as it stacks them before its sum
        (row i = g_i b_i / B, flat), `mean` their sum; `version` the version the round produces.
        `squares`, when every one is known, are the workers' abs(g_i)^2 (its admission check's
        by-product): then sum_i b_i abs(g_i)^2 is summed from them instead of read off the rows
        (used where `needs_squares`; else the rows' norm as below).

        `mean` is kept, not copied, for the next round's drift: the caller must not write it
        afterwards (the synchronizer makes a new one each round and only reads it).

        A round `wants` declines costs nothing; the round just before a measured one only keeps
        its mean and reports nothing; a measured round takes three dot products of the last two
        means (|g_t|^2, |g_{t-1}|^2, <g_t, g_{t-1}>) and, without `squares`, the norm of a
        block of `workers` consecutive rows that rotates with the version (all rows when
        `workers` is 0; for a subset, also the norm of its sum): a handful of torch calls
        whatever n is. With equal batches the block's sum_i b_i |g_i|^2 is (B^2 / b) times its
        squared Frobenius norm, so no per-row norms are needed. On a fixed random subset of
        coordinates when `coordinates` was set (scaled up to the slice: unbiased, as every
        coordinate is in the subset with the same chance)."""
        n = rows.shape[0]
        if n < 2 or n != len(samples):
            raise ValueError("a round needs two or more gradients, each with its sample count")
        if not self.wants(version):
            return None
        flat = mean if mean.dim() == 1 else mean.reshape(-1)
        mean_view = flat if self._index is None else flat.index_select(0, self._index)
        total = int(sum(samples))
        kept, self._kept = self._kept, (version, mean_view, total)
        if version % self.every != 0:
            return None  # kept for the next round's drift only
        mean_sq = float(torch.dot(mean_view, mean_view))
        previous = kept[1] if kept is not None and kept[0] == version - 1 else None
        if previous is not None and previous.dtype != mean_view.dtype:
            previous = None  # no drift across a change of the gradients' dtype
        m = self.workers if 0 < self.workers < n else n
        lo = min(((version // self.every) * m) % n, n - m)
        block = rows if m == n else rows.narrow(0, lo, m)
        if self._index is not None:
            block = block.index_select(1, self._index)
        chosen = samples[lo : lo + m]
        subset_sq = None
        if m < n:  # the subset's own mean, (B / B_U) sum_U row_i
            subset = float(torch.linalg.vector_norm(block.sum(dim=0)))
            subset_sq = (subset * total / sum(chosen)) ** 2
        known = _known(squares, n) if self._takes_squares else None
        if known is not None:
            # No pass over the rows at all: n multiplications in Python.
            weighted = math.fsum(b * sq for b, sq in zip(samples, known, strict=True))
        elif all(b == chosen[0] for b in chosen):
            # sum_i b_i |g_i|^2 = (B^2 / b) sum_i |row_i|^2: the block's Frobenius norm.
            weighted = total * total / chosen[0] * float(torch.linalg.vector_norm(block)) ** 2
        else:
            row_sq = torch.linalg.vector_norm(block, dim=1).square()
            factors = self._weights(tuple(chosen), total, row_sq.dtype)
            weighted = float(torch.dot(row_sq, factors))
        return RoundPartials(
            version=version,
            workers=n,
            samples=total,
            weighted_sq=weighted * self._scale,
            mean_sq=mean_sq * self._scale,
            cross=_dot(mean_view, previous) * self._scale if previous is not None else None,
            measured_workers=m if m < n else 0,
            measured_samples=int(sum(chosen)) if m < n else 0,
            previous_sq=_dot(previous, previous) * self._scale if previous is not None else None,
            previous_samples=kept[2] if previous is not None and kept is not None else 0,
            subset_sq=subset_sq * self._scale if subset_sq is not None else None,
        )

    def _weights(self, samples: tuple[int, ...], total: int, dtype: torch.dtype) -> torch.Tensor:
        """(B / b_i)^2 b_i = B^2 / b_i per row, kept while the round's batches stay the same."""
        cached = self._factors
        if cached is None or cached[0] != samples or cached[1].dtype != dtype:
            cached = (samples, torch.tensor([total * total / b for b in samples], dtype=dtype))
            self._factors = cached
        return cached[1]

    def _follow_dtype(self, mean_view: torch.Tensor) -> None:
        if self._previous.dtype != mean_view.dtype:  # the first round says the gradients' dtype
            self._previous = torch.zeros_like(mean_view)
            self._previous_version = None

    def forget(self) -> None:
        """The weights jumped (a rollback, a restore): no drift across it."""
        self._previous_version = None
        self._kept = None

    def _square(self, tensor: torch.Tensor) -> float:
        view = self._view(tensor)
        return float(torch.dot(view, view))

    def _view(self, tensor: torch.Tensor) -> torch.Tensor:
        flat = tensor.reshape(-1)
        return flat if self.stride == 1 else flat[:: self.stride]


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.dot(a, b))


def _known(squares: Sequence[float | None] | None, n: int) -> list[float] | None:
    """`squares` as floats when all n are known, else None (the rows' norm is taken)."""
    if squares is None or len(squares) != n:
        return None
    known = [sq for sq in squares if sq is not None]
    return known if len(known) == n else None


def _random_coordinates(numel: int, coordinates: int, seed: int) -> torch.Tensor:
    """`coordinates` of a slice of `numel`, drawn at random without replacement (every one
    with the same chance, so sums scaled by numel / coordinates stay unbiased), in order."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(numel, generator=generator)[:coordinates].sort().values


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

    def add(self, x: float) -> None:
        self.value = self.decay * self.value + (1.0 - self.decay) * x
        self.weight = self.decay * self.weight + (1.0 - self.decay)

    def get(self) -> float | None:
        return self.value / self.weight if self.weight > 0 else None


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
        )

    def forget_previous(self) -> None:
        """No drift across the next round (the weights jumped: a rollback, a restore)."""
        self._last = None

    # -- resume: the history a resumed run needs is the EMAs and the last round -----------

    def to_state(self) -> dict[str, Any]:
        return {
            "half_life_rounds": self.half_life_rounds,
            "noise": [self._noise.value, self._noise.weight],
            "grad": [self._grad.value, self._grad.weight],
            "drift": [self._drift.value, self._drift.weight],
            "rounds": self._rounds,
            "workers": self._workers,
            "last": asdict(self._last) if self._last is not None else None,
            "last_noise_per_sample": self._last_noise_per_sample,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> GradientStatsEstimator:
        estimator = cls(float(state["half_life_rounds"]))
        emas = {"noise": estimator._noise, "grad": estimator._grad, "drift": estimator._drift}
        for key, ema in emas.items():
            ema.value, ema.weight = (float(x) for x in state[key])
        estimator._rounds = int(state["rounds"])
        estimator._workers = int(state["workers"])
        last = state["last"]
        estimator._last = RoundPartials(**last) if last is not None else None
        noise = state["last_noise_per_sample"]
        estimator._last_noise_per_sample = None if noise is None else float(noise)
        return estimator
