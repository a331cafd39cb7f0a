"""The shard side of the gradient statistics: a BSP round's gradients in, `RoundPartials` out.

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

import torch

from syncswitch.core.timing.partials import RoundPartials


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
