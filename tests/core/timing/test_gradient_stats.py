"""The gradient statistics against an oracle: synthetic rounds with a known mean, covariance
and drift, and the shard-sum property."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.core.timing.gradient_stats import (
    GradientStatsEstimator,
    RoundPartials,
    RoundStatsAccumulator,
    add_partials,
)

PARAMS = 600
WORKERS = 8


class Oracle:
    """Per-sample gradients g ~ N(G_t, Sigma), G_t = G_0 + t v; a worker's gradient is the mean
    of its batch's per-sample gradients."""

    def __init__(self, seed: int = 0, drift_sq: float = 4.0) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.std = torch.linspace(0.2, 1.8, PARAMS)  # a diagonal Sigma, uneven on purpose
        self.noise_trace = float((self.std**2).sum())
        self.start = torch.randn(PARAMS, generator=self.gen) * 0.5
        v = torch.randn(PARAMS, generator=self.gen)
        self.velocity = v * math.sqrt(drift_sq) / v.norm()
        self.drift_sq = drift_sq

    def mean_at(self, t: int) -> torch.Tensor:
        return self.start + t * self.velocity

    def round(self, t: int, batches: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
        grads = []
        for b in batches:
            per_sample = self.mean_at(t) + self.std * torch.randn(b, PARAMS, generator=self.gen)
            grads.append(per_sample.mean(dim=0))
        total = sum(batches)
        weighted = [g * (b / total) for g, b in zip(grads, batches, strict=True)]
        mean = torch.stack(weighted).sum(dim=0)
        return grads, mean


def run(oracle: Oracle, rounds: int, batches: list[int], **accumulator_options):
    acc = RoundStatsAccumulator(PARAMS, **accumulator_options)
    est = GradientStatsEstimator(half_life_rounds=1e9)  # a plain mean of every round
    per_round = []
    for t in range(1, rounds + 1):
        grads, mean = oracle.round(t, batches)
        partials = acc.observe(t, grads, batches, mean)
        if partials is not None:
            per_round.append(est.add(partials))
    return est, per_round


def within(value: float, truth: float, tolerance: float = 0.10) -> bool:
    return abs(value - truth) <= tolerance * abs(truth)


@pytest.mark.parametrize("batches", [[4] * WORKERS, [2, 3, 4, 5, 6, 4, 4, 4]])
def test_noise_gradient_and_drift_within_ten_percent_of_the_truth(batches):
    oracle = Oracle(seed=1)
    est, per_round = run(oracle, 300, batches)
    signals = est.signals
    assert signals is not None and signals.drift_sq is not None
    assert signals.rounds == 300
    # The mean gradient moves over the rounds: the truth is the average |G_t|^2.
    true_grad_sq = sum(float(oracle.mean_at(t).square().sum()) for t in range(1, 301)) / 300
    assert within(signals.noise_trace, oracle.noise_trace)
    assert within(signals.grad_sq, true_grad_sq)
    assert within(signals.drift_sq, oracle.drift_sq)
    assert within(signals.noise_scale, oracle.noise_trace / true_grad_sq)
    # Each round's own estimates are unbiased, noisier than the mean but centred on the truth.
    drifts = [r.drift_sq for r in per_round if r.drift_sq is not None]
    assert len(drifts) == 299
    assert min(drifts) < oracle.drift_sq < max(drifts)


def test_drift_is_noise_corrected():
    # Without the correction the squared difference of two noisy means is dominated by their
    # noise (2 tr(Sigma)/B, about 18 here, against a drift of 0.5).
    oracle = Oracle(seed=2, drift_sq=0.5)
    est, _ = run(oracle, 2000, [4] * WORKERS)
    assert est.signals is not None and est.signals.drift_sq is not None
    assert 2 * oracle.noise_trace / (4 * WORKERS) > 30 * oracle.drift_sq
    assert within(est.signals.drift_sq, oracle.drift_sq, 0.25)  # small against the noise


def test_every_other_rounds_and_strided_coordinates_still_estimate_the_truth():
    oracle = Oracle(seed=3)
    est, per_round = run(oracle, 1200, [4] * WORKERS, every=4, stride=3)
    signals = est.signals
    assert signals is not None and signals.drift_sq is not None
    assert signals.rounds == 300  # one round in four measures its noise
    assert sum(r.drift_sq is not None for r in per_round) == 300  # and its drift
    assert within(signals.noise_trace, oracle.noise_trace)
    assert within(signals.drift_sq, oracle.drift_sq)


def test_partials_of_shards_add_up_to_the_whole():
    oracle = Oracle(seed=4)
    bounds = [0, 150, 151, 420, PARAMS]  # uneven slices, one of a single coordinate
    whole = RoundStatsAccumulator(PARAMS)
    shards = [RoundStatsAccumulator(hi - lo) for lo, hi in itertools.pairwise(bounds)]
    batches = [4, 4, 3, 5, 4, 4, 4, 4]
    for t in (1, 2, 3):
        grads, mean = oracle.round(t, batches)
        expected = whole.observe(t, grads, batches, mean)
        parts = [
            shard.observe(t, [g[lo:hi] for g in grads], batches, mean[lo:hi])
            for shard, (lo, hi) in zip(shards, itertools.pairwise(bounds), strict=True)
        ]
        assert expected is not None and all(p is not None for p in parts)
        summed = add_partials(parts)  # type: ignore[arg-type]
        assert (summed.version, summed.workers, summed.samples) == (t, WORKERS, 32)
        assert summed.mean_sq == pytest.approx(expected.mean_sq, rel=1e-5)
        assert summed.weighted_sq == pytest.approx(expected.weighted_sq, rel=1e-5)
        if t == 1:
            assert summed.cross is None and expected.cross is None  # no previous round yet
        else:
            assert summed.cross == pytest.approx(expected.cross, rel=1e-5)


def test_partials_of_different_rounds_do_not_add():
    a = RoundPartials(version=3, workers=8, samples=32, weighted_sq=1.0, mean_sq=1.0, cross=None)
    b = RoundPartials(version=4, workers=8, samples=32, weighted_sq=1.0, mean_sq=1.0, cross=None)
    with pytest.raises(ValueError, match="different rounds"):
        _ = a + b
    # A quantity one shard did not measure is unmeasured for the round.
    c = RoundPartials(version=3, workers=8, samples=32, weighted_sq=None, mean_sq=2.0, cross=1.0)
    assert (a + c).weighted_sq is None and (a + c).cross is None and (a + c).mean_sq == 3.0


def test_no_drift_across_a_gap_in_versions_or_after_forget():
    oracle = Oracle(seed=5)
    acc = RoundStatsAccumulator(PARAMS)
    est = GradientStatsEstimator()
    batches = [4] * WORKERS
    for t in (1, 2, 5):  # versions 3 and 4 came from ASP updates: 5 is no drift of 2
        grads, mean = oracle.round(t, batches)
        estimate = est.add(acc.observe(t, grads, batches, mean))  # type: ignore[arg-type]
    assert estimate.drift_sq is None
    acc.forget()
    grads, mean = oracle.round(6, batches)
    assert acc.observe(6, grads, batches, mean).cross is None  # type: ignore[union-attr]


def test_resumed_estimator_continues_exactly():
    oracle = Oracle(seed=6)
    acc = RoundStatsAccumulator(PARAMS)
    first = GradientStatsEstimator(half_life_rounds=20)
    batches = [4] * WORKERS
    rounds = [oracle.round(t, batches) for t in range(1, 41)]
    for t, (grads, mean) in enumerate(rounds[:20], start=1):
        first.add(acc.observe(t, grads, batches, mean))  # type: ignore[arg-type]
    resumed = GradientStatsEstimator.from_plain(first.to_plain())
    for t, (grads, mean) in enumerate(rounds[20:], start=21):
        partials = acc.observe(t, grads, batches, mean)
        first.add(partials)  # type: ignore[arg-type]
        resumed.add(partials)  # type: ignore[arg-type]
    assert resumed.signals == first.signals


def test_a_round_needs_two_gradients():
    acc = RoundStatsAccumulator(4)
    with pytest.raises(ValueError, match="two or more"):
        acc.observe(1, [torch.zeros(4)], [4], torch.zeros(4))
    with pytest.raises(ValueError, match="every"):
        RoundStatsAccumulator(4, every=0)


def test_a_rotating_subset_of_workers_still_estimates_the_noise():
    oracle = Oracle(seed=7)
    batches = [4, 4, 3, 5, 4, 4, 6, 2]
    est, _ = run(oracle, 600, batches, workers=3)
    signals = est.signals
    assert signals is not None and signals.drift_sq is not None
    assert within(signals.noise_trace, oracle.noise_trace)
    assert within(signals.drift_sq, oracle.drift_sq)
    with pytest.raises(ValueError, match="workers"):
        RoundStatsAccumulator(4, workers=1)


def test_a_subset_of_workers_adds_across_shards_like_the_whole():
    oracle = Oracle(seed=8)
    batches = [4] * WORKERS
    whole = RoundStatsAccumulator(PARAMS, workers=3)
    halves = [RoundStatsAccumulator(300, workers=3), RoundStatsAccumulator(300, workers=3)]
    grads, mean = oracle.round(5, batches)
    expected = whole.observe(5, grads, batches, mean)
    parts = [
        h.observe(5, [g[lo : lo + 300] for g in grads], batches, mean[lo : lo + 300])
        for h, lo in zip(halves, (0, 300), strict=True)
    ]
    summed = add_partials(parts)  # type: ignore[arg-type]
    assert expected is not None
    assert (summed.measured_workers, summed.measured_samples) == (3, 12)
    assert summed.weighted_sq == pytest.approx(expected.weighted_sq, rel=1e-5)


def stacked_round(generator: torch.Generator, samples: list[int]):
    """Random float64 gradients of 50 values, as the synchronizer stacks them (g_i b_i / B)
    and their sum."""
    total = sum(samples)
    values = [torch.randn(50, generator=generator, dtype=torch.float64) for _ in samples]
    rows = torch.stack([v * (b / total) for v, b in zip(values, samples, strict=True)])
    return values, rows, rows.sum(dim=0)


def test_observe_rows_gives_the_partials_observe_gives_with_or_without_squares() -> None:
    # The synchronizer's stacked rows (g_i b_i / B) and their sum: one norm call, or the
    # workers' squared norms as the admission check gives them; the same sums either way.
    generator = torch.Generator().manual_seed(3)
    samples = [8, 8, 16, 4]
    by_rows, by_squares, by_values = (RoundStatsAccumulator(50) for _ in range(3))
    for version in (1, 2, 4, 5):
        values, rows, mean = stacked_round(generator, samples)
        squares: list[float | None] = [float(torch.dot(v, v)) for v in values]
        if version == 5:
            squares[1] = None  # e.g. its square overflowed: the rows' norm is taken instead
            squares[2] = 1e9  # ignored then
        want = by_values.observe(version, values, samples, mean)
        assert want is not None
        for got in (
            by_rows.observe_rows(version, rows, samples, mean),
            by_squares.observe_rows(version, rows, samples, mean, squares=squares),
        ):
            assert got is not None
            assert got.weighted_sq == pytest.approx(want.weighted_sq, rel=1e-9)
            assert got.mean_sq == pytest.approx(want.mean_sq, rel=1e-9)
            assert (got.cross is None) == (want.cross is None)  # no drift across version 3
            if got.cross is not None:
                assert got.cross == pytest.approx(want.cross, rel=1e-9)


def test_squares_are_only_asked_for_where_every_worker_and_coordinate_is_measured() -> None:
    assert [RoundStatsAccumulator(50, every=4).needs_squares(v) for v in range(1, 9)] == [
        False,
        False,
        False,
        True,
        False,
        False,
        False,
        True,
    ]
    assert not RoundStatsAccumulator(50, workers=2).needs_squares(4)
    assert not RoundStatsAccumulator(50, stride=2).needs_squares(4)
    assert not RoundStatsAccumulator(10_000, coordinates=100).needs_squares(4)
    assert RoundStatsAccumulator(150, coordinates=100).needs_squares(4)  # the subset is moot


def test_the_synchronizer_measures_with_its_admission_checks_squares() -> None:
    # The whole path: each gradient of a measured round is squared by the admission check,
    # and the round's partials equal the reference form's on the same gradients.
    workers, numel, every = 4, 300, 2
    config = SyncConfig(
        workers=workers,
        total_samples=10**9,
        schedule=Schedule.parse("online"),
        lr=1e-3,
        stats_coordinates=0,
        stats_every=every,
    )
    sync = Synchronizer(config, FlatSGD(torch.zeros(numel)))
    reference = RoundStatsAccumulator(numel, every=every)
    generator = torch.Generator().manual_seed(6)
    measured = 0
    for version in range(1, 7):
        values = [torch.randn(numel, generator=generator) for _ in range(workers)]
        sent = [
            Gradient(w, version - 1, sync.live.version, v, 8, 0.0, 0.0)
            for w, v in enumerate(values)
        ]
        reported = [p for g in sent for p in sync.submit(g).partials]
        assert sync.live.version == version
        assert [g.squared_norm is not None for g in sent] == [version % every == 0] * workers
        mean = torch.stack([v / workers for v in values]).sum(dim=0)
        want = reference.observe(version, values, [8] * workers, mean)
        # The reference reports the round before a measured one too (its mean only).
        assert len(reported) == (version % every == 0)
        for got in reported:
            assert want is not None and got.cross is not None and want.cross is not None
            assert got.weighted_sq == pytest.approx(want.weighted_sq, rel=1e-5)
            assert got.mean_sq == pytest.approx(want.mean_sq, rel=1e-5)
            assert got.cross == pytest.approx(want.cross, rel=1e-5)
            measured += 1
    assert measured == 3


def test_a_fixed_coordinate_subset_keeps_the_noise_estimate_within_ten_percent() -> None:
    generator = torch.Generator().manual_seed(5)
    numel, workers, batch = 4000, 8, 16
    sigma = torch.linspace(0.5, 2.0, numel, dtype=torch.float64)  # an uneven diagonal
    true_noise = float((sigma**2).sum())
    accumulator = RoundStatsAccumulator(numel, coordinates=400, seed=1)
    estimator = GradientStatsEstimator(half_life_rounds=1e9)
    for version in range(1, 201):
        values = [
            0.1 + sigma * torch.randn(numel, generator=generator, dtype=torch.float64) / batch**0.5
            for _ in range(workers)
        ]
        rows = torch.stack(values) / workers
        estimator.add(accumulator.observe_rows(version, rows, [batch] * workers, rows.sum(0)))
    signals = estimator.signals
    assert signals is not None
    assert signals.noise_trace == pytest.approx(true_noise, rel=0.1)


def run_rows(
    oracle: Oracle, rounds: int, batches: list[int], squares: bool = False, **accumulator_options
):
    """As `run`, through the synchronizer's form (`observe_rows` on the stacked rows; with
    `squares`, given each worker's squared norm as its admission check computes it)."""
    acc = RoundStatsAccumulator(PARAMS, **accumulator_options)
    est = GradientStatsEstimator(half_life_rounds=1e9)
    total = sum(batches)
    for t in range(1, rounds + 1):
        grads, _ = oracle.round(t, batches)
        rows = torch.stack([g * (b / total) for g, b in zip(grads, batches, strict=True)])
        given = [float(torch.dot(g, g)) for g in grads] if squares else None
        partials = acc.observe_rows(t, rows, batches, rows.sum(dim=0), squares=given)
        if partials is not None:
            est.add(partials)
    return est


@pytest.mark.parametrize(
    ("batches", "every", "workers", "squares"),
    [
        ([4] * WORKERS, 1, 0, False),
        ([4] * WORKERS, 4, 3, False),
        ([2, 3, 4, 5, 6, 4, 4, 4], 4, 3, False),
        ([4] * 16, 2, 8, False),
        ([2, 3, 4, 5, 6, 4, 4, 4], 8, 0, False),
        ([4] * WORKERS, 4, 0, True),
        ([2, 3, 4, 5, 6, 4, 4, 4], 2, 0, True),
    ],
)
def test_the_synchronizers_form_within_ten_percent_of_the_truth(batches, every, workers, squares):
    # One round in `every` (in pairs), `workers` rows squared per measured round, or the
    # workers' squared norms given: the estimates stay within 10% of the truth (here |G|^2
    # grows far above the noise, where a subset's noise taken around the whole round's mean
    # would be far off).
    oracle = Oracle(seed=9)
    rounds = 400 * every
    est = run_rows(oracle, rounds, batches, squares, every=every, workers=workers)
    signals = est.signals
    assert signals is not None and signals.drift_sq is not None
    assert signals.rounds == rounds // every
    true_grad_sq = sum(float(oracle.mean_at(t).square().sum()) for t in range(1, rounds + 1))
    assert within(signals.noise_trace, oracle.noise_trace)
    assert within(signals.grad_sq, true_grad_sq / rounds)
    assert within(signals.drift_sq, oracle.drift_sq)


def test_the_synchronizers_form_reports_measured_rounds_only_and_adds_across_shards():
    oracle = Oracle(seed=10)
    batches = [4] * WORKERS
    bounds = [0, 150, 151, PARAMS]
    whole = RoundStatsAccumulator(PARAMS, every=4, workers=3)
    shards = [
        RoundStatsAccumulator(hi - lo, every=4, workers=3) for lo, hi in itertools.pairwise(bounds)
    ]
    reported = []
    for t in range(1, 10):
        grads, _ = oracle.round(t, batches)
        rows = torch.stack([g * (4 / 32) for g in grads])
        mean = rows.sum(dim=0)
        expected = whole.observe_rows(t, rows, batches, mean)
        parts = [
            s.observe_rows(t, rows[:, lo:hi], batches, mean[lo:hi])
            for s, (lo, hi) in zip(shards, itertools.pairwise(bounds), strict=True)
        ]
        if expected is None:
            assert parts == [None] * len(shards)
            continue
        reported.append(t)
        summed = add_partials(parts)  # type: ignore[arg-type]
        for key in ("weighted_sq", "mean_sq", "cross", "previous_sq", "subset_sq"):
            assert getattr(summed, key) == pytest.approx(getattr(expected, key), rel=1e-4)
        assert summed.previous_samples == expected.previous_samples == 32
    # Versions 4 and 8 are measured, after keeping 3's and 7's means for their drift.
    assert reported == [4, 8]
    whole.forget()
    grads, _ = oracle.round(12, batches)
    rows = torch.stack([g * (4 / 32) for g in grads])
    assert whole.observe_rows(11, rows, batches, rows.sum(dim=0)) is None
    after = whole.observe_rows(12, rows, batches, rows.sum(dim=0))
    assert after is not None and after.cross is not None  # 11 was kept after the forget
    whole.forget()
    skipped = whole.observe_rows(16, rows, batches, rows.sum(dim=0))
    assert skipped is not None and skipped.cross is None and skipped.previous_sq is None


def test_the_drifts_standard_error_matches_its_spread_across_runs():
    # 24 independent runs of the same oracle: the smoothed drift scatters across them about
    # as much as each run's own standard error says (the rule's confidence rests on it).
    finals, errors = [], []
    for seed in range(24):
        oracle = Oracle(seed=100 + seed, drift_sq=0.5)
        acc = RoundStatsAccumulator(PARAMS)
        est = GradientStatsEstimator(half_life_rounds=8)
        batches = [4] * WORKERS
        for t in range(1, 61):
            grads, mean = oracle.round(t, batches)
            est.add(acc.observe(t, grads, batches, mean))  # type: ignore[arg-type]
        signals = est.signals
        assert signals is not None and signals.drift_sq is not None
        assert signals.drift_stderr is not None and signals.drift_rounds == 59
        finals.append(signals.drift_sq)
        errors.append(signals.drift_stderr)
    spread = float(torch.tensor(finals).std())
    typical = sum(errors) / len(errors)
    assert 0.7 * spread <= typical <= 1.4 * spread
    # Noise-dominated (some runs estimate it below 0), but unbiased across runs.
    assert min(finals) < 0
    assert 0.5 - 3 * spread / math.sqrt(24) < sum(finals) / 24
    assert sum(finals) / 24 < 0.5 + 3 * spread / math.sqrt(24)


def test_the_drifts_error_is_unknown_until_two_drifts_were_seen():
    oracle = Oracle(seed=7)
    acc = RoundStatsAccumulator(PARAMS)
    est = GradientStatsEstimator(half_life_rounds=8)
    batches = [4] * WORKERS
    seen = []
    for t in range(1, 4):
        grads, mean = oracle.round(t, batches)
        est.add(acc.observe(t, grads, batches, mean))  # type: ignore[arg-type]
        signals = est.signals
        assert signals is not None
        seen.append((signals.drift_rounds, signals.drift_stderr is not None))
    assert seen == [(0, False), (1, False), (2, True)]
