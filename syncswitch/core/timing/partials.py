"""One BSP round's gradient sums over a shard's slice, as the shards report them.

Sharding: every quantity is a sum over coordinates (|g_i|^2, |g|^2 and <g_t, g_{t-1}> over a
shard's slice), so each shard reports its slice's partial sums (`RoundPartials`, which add
with `+`) and whoever holds all shards' partials for a round (the run controller) adds them
and feeds the sum to one `GradientStatsEstimator`. Only scalars cross processes.

The formulas these sums feed are in `gradient_stats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
