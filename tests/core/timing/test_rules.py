"""The switch-timing rules on scripted signals."""

from __future__ import annotations

import pytest

from syncswitch.core.timing.gradient_stats import GradientSignals
from syncswitch.core.timing.rules import (
    RULE_NAMES,
    GradientPoint,
    LossPlateauRule,
    LossPoint,
    NoiseScaleRule,
    OnlineSwitchDecision,
    ShareBounds,
    StalenessNoiseRule,
    TimingReason,
    decide,
    first_switch,
    make_rule,
    staleness_ratio,
)
from syncswitch.records.switch import rule_name

NO_BOUNDS = ShareBounds(floor=0.0, ceiling=1.0)


def point(
    progress: float,
    ratio: float,
    workers: int = 8,
    batch: int = 32,
    *,
    stderr_ratio: float = 0.0,
    rounds: int = 100,
    grad_sq: float = 0.01,
) -> GradientPoint:
    """A point whose staleness ratio (n - 1)^p D b / tr(Sigma) is `ratio` under the default
    exponent p (tr(Sigma) = 64), its drift's standard error `stderr_ratio` in the same units
    (0 and 100 measured drifts: an estimate the rule trusts); |G|^2 0.01 by default, a noise
    scale of 6400, noise-dominated at any batch here."""
    noise = 64.0
    per_ratio = (noise / batch) / (workers - 1) ** StalenessNoiseRule().staleness_exponent
    return GradientPoint(
        progress,
        workers,
        batch,
        noise,
        grad_sq=grad_sq,
        drift_sq=ratio * per_ratio,
        drift_stderr=stderr_ratio * per_ratio,
        drift_rounds=rounds,
    )


def test_staleness_ratio_is_the_staleness_error_over_the_asp_gradients_noise():
    p = GradientPoint(0.3, workers=8, worker_batch=32, noise_trace=64.0, grad_sq=1.0, drift_sq=0.1)
    # (8 - 1) * 0.1 / (64 / 32)
    assert staleness_ratio(p) == pytest.approx(0.35)
    assert staleness_ratio(p, exponent=2.0) == pytest.approx(49 * 0.1 / 2)
    assert staleness_ratio(GradientPoint(0.3, 8, 32, 64.0, 1.0, None)) is None
    # A drift estimated below zero (noise-corrected, near the end) counts as none.
    assert staleness_ratio(GradientPoint(0.3, 8, 32, 64.0, 1.0, -0.5)) == 0.0


def test_staleness_rule_switches_once_the_ratio_falls_and_stays_below_the_threshold():
    rule = StalenessNoiseRule(threshold=0.5, patience=3)
    ratios = [0.2, 0.1, 2.0, 3.0, 1.0, 0.4, 0.6, 0.4, 0.3, 0.2, 0.1]
    history = [point(0.05 * (i + 1), r) for i, r in enumerate(ratios)]
    decision = first_switch(rule, history, NO_BOUNDS)
    assert decision is not None and decision.switch
    assert decision.reason is TimingReason.SIGNAL
    # Not at the first points (below the threshold, but never above it yet: the flat start),
    # not at 0.30 (one point below, then above again), but after three in a row (0.40, 0.45,
    # 0.50).
    assert decision.progress == pytest.approx(0.5)
    assert decision.values["staleness_ratio"] == pytest.approx(0.2)
    assert decision.values["threshold"] == 0.5
    assert "staleness: signal" in decision.describe()


def test_staleness_rule_waits_while_the_ratio_is_high():
    rule = StalenessNoiseRule(threshold=0.5)
    history = [point(0.1 * (i + 1), 2.0) for i in range(5)]
    decision = decide(rule, history, 0.5, NO_BOUNDS)
    assert not decision.switch and decision.reason is TimingReason.WAITING
    assert decide(rule, [], 0.5, NO_BOUNDS).reason is TimingReason.NO_SIGNAL


def test_floor_holds_a_fired_rule_back_and_the_ceiling_forces_a_switch():
    rule = StalenessNoiseRule(threshold=0.5, patience=1)
    fired = [point(0.01, 2.0), point(0.02, 0.1)]
    bounds = ShareBounds(floor=1 / 16, ceiling=3 / 4)
    early = decide(rule, fired, 0.02, bounds)
    assert not early.switch and early.reason is TimingReason.BEFORE_FLOOR
    assert decide(rule, fired, 0.07, bounds).reason is TimingReason.SIGNAL
    high = [point(0.1 * (i + 1), 5.0) for i in range(8)]
    late = decide(rule, high, 0.75, bounds)
    assert late.switch and late.reason is TimingReason.CEILING
    assert late.values["staleness_ratio"] == pytest.approx(5.0)  # the signal is still shown
    assert late.describe().startswith("switch at the ceiling (seen at 0.750; staleness")
    assert early.describe().startswith("stay at 0.020 (staleness")
    with pytest.raises(ValueError, match="floor <= ceiling"):
        ShareBounds(floor=0.8, ceiling=0.5)


def test_more_workers_switch_later_for_the_same_drift_and_noise():
    # Same drift, noise and progress curve; only n differs: (n - 1) D b / tr(Sigma).
    rule = StalenessNoiseRule(threshold=0.5, patience=1)
    drifts = [0.4 * 0.8**i for i in range(40)]

    def share(workers: int) -> float:
        history = [
            GradientPoint(0.025 * (i + 1), workers, 32, 64.0, 0.01, d, 0.0, 100)
            for i, d in enumerate(drifts)
        ]
        decision = first_switch(rule, history, NO_BOUNDS)
        assert decision is not None
        return decision.progress

    assert share(8) < share(16) < share(32)


def test_a_negative_noise_dominated_drift_never_counts_as_below_the_threshold():
    # The held-out job's case: a drift estimated below zero after few measured rounds, its
    # error far larger than the threshold's drift: read as a ratio of 0, it used to fire.
    rule = StalenessNoiseRule(threshold=0.15, patience=3)
    armed = [point(0.05, 2.0, rounds=10)]
    noisy = [point(0.1 + 0.01 * i, -0.4, stderr_ratio=0.5, rounds=10) for i in range(20)]
    decision = first_switch(rule, armed + noisy, NO_BOUNDS)
    assert decision is None
    last = decide(rule, armed + noisy, 0.3, NO_BOUNDS)
    assert last.reason is TimingReason.UNCERTAIN
    assert last.values["staleness_ratio"] == 0.0
    assert last.values["staleness_ratio_upper"] > 0.15


def test_too_few_measured_drifts_never_count_however_small_the_error():
    rule = StalenessNoiseRule(threshold=0.15, patience=3, min_drift_rounds=8)
    history = [point(0.05, 2.0, rounds=2)] + [
        point(0.1 + 0.01 * i, 0.01, stderr_ratio=0.001, rounds=3 + i) for i in range(4)
    ]
    # Rounds 3-6: under 8 measured drifts, never trusted.
    assert first_switch(rule, history, NO_BOUNDS) is None
    more = history + [point(0.2 + 0.01 * i, 0.01, rounds=8 + i) for i in range(3)]
    decision = first_switch(rule, more, NO_BOUNDS)
    assert decision is not None and decision.progress == pytest.approx(0.22)


def test_a_clear_fall_fires_and_an_uncertain_check_breaks_the_run_of_checks_below():
    rule = StalenessNoiseRule(threshold=0.15, patience=3, confidence=2.0)
    falling = [point(0.05, 1.0), point(0.1, 0.5), point(0.15, 0.3)]
    # 0.02 + 2 * 0.03 = 0.08 < 0.15: sure; 0.05 + 2 * 0.06 = 0.17: below, but not surely.
    sure = [point(0.2 + 0.01 * i, 0.02, stderr_ratio=0.03) for i in range(2)]
    unsure = [point(0.22, 0.05, stderr_ratio=0.06)]
    again = [point(0.23 + 0.01 * i, 0.02, stderr_ratio=0.03) for i in range(3)]
    decision = first_switch(rule, falling + sure + unsure + again, NO_BOUNDS)
    assert decision is not None and decision.reason is TimingReason.SIGNAL
    assert decision.progress == pytest.approx(0.25)  # three sure checks after the unsure one
    assert decide(rule, falling + sure + unsure, 0.22, NO_BOUNDS).reason is TimingReason.UNCERTAIN


def test_a_still_descending_run_stays_in_bsp_however_small_its_staleness_ratio():
    # |G|^2 above the noise of BSP's averaged gradient (noise scale 64 < n b = 256): the
    # slope, not the noise, dominates, and a stale gradient would overshoot it.
    rule = StalenessNoiseRule(threshold=0.15, patience=3)
    descending = [point(0.05, 2.0, grad_sq=1.0)] + [
        point(0.1 + 0.01 * i, 0.01, grad_sq=1.0) for i in range(10)
    ]
    assert first_switch(rule, descending, NO_BOUNDS) is None
    decision = decide(rule, descending, 0.2, NO_BOUNDS)
    assert decision.reason is TimingReason.DESCENDING
    assert decision.values["noise_scale_over_batch"] == pytest.approx(64 / 256)
    # The same ratios once the noise dominates (|G|^2 0.2: noise scale 320 >= 256) fire.
    settled = descending + [point(0.3 + 0.01 * i, 0.01, grad_sq=0.2) for i in range(3)]
    fired = first_switch(rule, settled, NO_BOUNDS)
    assert fired is not None and fired.progress == pytest.approx(0.32)


def test_noise_scale_rule_switches_when_the_noise_scale_passes_a_multiple_of_the_batch():
    rule = NoiseScaleRule(threshold=2.0, patience=2)
    # n b = 256; B_simple = noise_trace / grad_sq.
    scales = [100, 300, 400, 520, 600, 700]
    history = [
        GradientPoint(0.1 * (i + 1), 8, 32, float(s), grad_sq=1.0, drift_sq=None)
        for i, s in enumerate(scales)
    ]
    decision = first_switch(rule, history, NO_BOUNDS)
    assert decision is not None and decision.progress == pytest.approx(0.5)
    assert decision.values["noise_scale"] == 600


def test_loss_plateau_switches_when_the_loss_stops_improving_over_the_window():
    rule = LossPlateauRule(window=0.1, min_improvement=0.05)
    losses = [2.0, 1.5, 1.0, 0.8, 0.7, 0.68, 0.67, 0.66]
    history = [LossPoint(0.05 * (i + 1), loss) for i, loss in enumerate(losses)]
    decision = first_switch(rule, history, NO_BOUNDS)
    assert decision is not None and decision.reason is TimingReason.SIGNAL
    # At 0.35: 0.67 against 0.70 at 0.25 is 4.3% better, under 5%.
    assert decision.progress == pytest.approx(0.35)
    assert decision.values["improvement"] == pytest.approx((0.7 - 0.67) / 0.7)
    # The first window is not judged: there is no loss a window ago yet.
    assert decide(rule, history[:1], 0.05, NO_BOUNDS).reason is TimingReason.NO_SIGNAL


def test_points_come_from_the_estimators_signals():
    signals = GradientSignals(
        version=10,
        rounds=10,
        workers=8,
        samples=256,
        noise_trace=64.0,
        grad_sq=0.5,
        drift_sq=0.2,
        drift_stderr=0.05,
        drift_rounds=9,
    )
    p = GradientPoint.from_signals(0.25, signals)
    assert (p.workers, p.worker_batch, p.drift_sq) == (8, 32.0, 0.2)
    assert (p.drift_stderr, p.drift_rounds) == (0.05, 9)
    assert staleness_ratio(p) == pytest.approx(7 * 0.2 / 2.0)


def test_a_rule_is_recorded_under_its_command_line_name_and_old_names_read_as_it() -> None:
    # One name everywhere: what `--switch-rule` takes is what a run records and prints; run
    # directories written before (staleness_noise, noise_scale, loss_plateau) read the same.
    for name in RULE_NAMES:
        assert make_rule(name).name == name
    record = OnlineSwitchDecision(True, TimingReason.SIGNAL, "staleness_noise", 0.3).to_plain()
    assert OnlineSwitchDecision.from_plain(record).rule == "staleness"
    assert [rule_name(n) for n in ("staleness_noise", "noise_scale", "loss_plateau")] == [
        "staleness",
        "noise-scale",
        "plateau",
    ]
