import math
import random
from collections.abc import Iterable

import pytest

from syncswitch.core.reliability.divergence import (
    Divergence,
    DivergenceGuard,
    DivergenceKind,
    GiveUp,
    GuardConfig,
    Rollback,
    RollbackConfig,
    lower_momentum,
    rollback_decision,
)
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.protocol import BSP


def _noisy(level: float, rng: random.Random, sigma: float = 0.3) -> float:
    """A per-batch loss: the level times mean-one-ish lognormal noise."""
    return level * math.exp(rng.gauss(0.0, sigma))


def _feed(guard: DivergenceGuard, losses: Iterable[float]) -> list[tuple[int, Divergence]]:
    verdicts = []
    losses = list(losses)
    for i, loss in enumerate(losses):
        verdict = guard.observe(loss, progress=i / len(losses), time_s=i * 0.01)
        if verdict is not None:
            verdicts.append((i, verdict))
    return verdicts


def _training_curve(steps: int, rng: random.Random, floor: float = 0.3) -> list[float]:
    """Cross-entropy-like: starts near ln(10), decays to `floor`, with per-batch noise."""
    return [_noisy(floor + (2.3 - floor) * math.exp(-i / 150), rng) for i in range(steps)]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_loss_trips_at_once_even_in_warmup(bad) -> None:
    guard = DivergenceGuard()
    assert _feed(guard, [2.3, 2.2, 2.1]) == []
    verdict = guard.observe(bad, progress=0.01, time_s=1.0)
    assert verdict is not None and verdict.kind is DivergenceKind.NON_FINITE_LOSS
    assert f"non-finite training loss {bad}" in verdict.reason
    assert verdict.observations == 4 and verdict.reference is None
    assert verdict.healthy_progress is not None
    assert guard.tripped == verdict


def test_a_slow_drift_up_is_detected_near_three_times_the_best_level() -> None:
    rng = random.Random(1)
    settle = _training_curve(800, rng)
    drift_levels = [0.3 + 2.7 * i / 2000 for i in range(2000)]  # 0.3 -> 3.0, slowly
    losses = settle + [_noisy(level, rng) for level in drift_levels]
    guard = DivergenceGuard()
    [(index, verdict)] = _feed(guard, losses)
    assert verdict.kind is DivergenceKind.LOSS_RISE
    assert verdict.reference == pytest.approx(0.3, rel=0.2)
    level_at_detection = drift_levels[index - len(settle)]
    assert 0.8 < level_at_detection < 1.3  # about 3x the best level, not much later
    assert verdict.loss > 3 * verdict.reference
    assert "training loss diverged" in verdict.reason and "the best level" in verdict.reason
    assert verdict.healthy_progress is not None and verdict.healthy_progress < verdict.progress


def test_a_sudden_blow_up_is_detected_within_a_window() -> None:
    rng = random.Random(2)
    losses = _training_curve(600, rng) + [_noisy(5.0, rng) for _ in range(100)]
    [(index, verdict)] = _feed(DivergenceGuard(), losses)
    # The 11th high loss makes the (lower) median of 20 high; then 10 in a row.
    assert index == 600 + 10 + 9
    assert verdict.healthy_progress == (600 + 9) / len(losses)


def test_single_spikes_and_short_bursts_are_not_divergence() -> None:
    rng = random.Random(3)
    losses = _training_curve(3000, rng)
    losses[700] = 1e6  # one absurd spike
    for i in range(1500, 1510):  # a burst of 10: fewer than half the window
        losses[i] = 50.0
    for i in range(2000, 3000, 7):  # frequent isolated spikes
        losses[i] = 20.0
    assert _feed(DivergenceGuard(), losses) == []


def test_the_noisy_early_phase_is_not_divergence() -> None:
    """A bumpy start (loss rising before it falls) with heavy per-batch noise."""
    for seed in range(5):
        rng = random.Random(seed)
        bump = [_noisy(2.3 + 2.0 * math.sin(math.pi * i / 80), rng, 0.5) for i in range(80)]
        rest = [_noisy(0.2 + 2.1 * math.exp(-i / 300), rng, 0.5) for i in range(3000)]
        assert _feed(DivergenceGuard(), bump + rest) == [], seed


def test_late_training_wander_at_tiny_losses_is_not_divergence() -> None:
    """As in a real MNIST-1D run: best medians near 0.01, healthy ones wandering to ~0.15."""
    rng = random.Random(4)
    curve = _training_curve(1500, rng, floor=0.01)
    wander = [_noisy(0.01 if (i // 200) % 2 == 0 else 0.15, rng, 1.4) for i in range(2000)]
    guard = DivergenceGuard()
    assert _feed(guard, curve + wander) == []  # 15x the best, but far from the initial 2.3
    assert guard.initial_level == pytest.approx(2.0, rel=0.2)
    assert 0.35 < guard.threshold() < 0.6  # a quarter of the way back up
    ratio_only = DivergenceGuard(GuardConfig(min_rise_fraction=0.0))
    assert len(_feed(ratio_only, curve + wander)) == 1  # what min_rise_fraction prevents


def test_initial_level_is_kept_across_reset_and_can_be_given() -> None:
    rng = random.Random(7)
    guard = DivergenceGuard()
    _feed(guard, _training_curve(300, rng))
    initial = guard.initial_level
    assert initial is not None and initial > 1.5
    guard.reset()
    assert guard.initial_level == initial
    resumed = DivergenceGuard(initial_level=2.3)  # a resumed run starts at a low loss
    _feed(resumed, [_noisy(0.05, rng, 1.0) for _ in range(200)])
    assert resumed.initial_level == 2.3
    assert resumed.threshold() == pytest.approx(
        resumed.reference + 0.25 * (2.3 - resumed.reference)
    )
    with pytest.raises(ValueError, match="initial loss level nan must be a finite number >= 0"):
        DivergenceGuard(initial_level=float("nan"))


def test_after_a_verdict_it_stays_quiet_until_reset() -> None:
    rng = random.Random(5)
    guard = DivergenceGuard()
    [(_, verdict)] = _feed(guard, _training_curve(600, rng) + [5.0] * 50)
    assert _feed(guard, [float("nan"), 100.0] * 50) == []
    assert guard.tripped == verdict


def test_after_reset_no_immediate_retrigger() -> None:
    rng = random.Random(6)
    guard = DivergenceGuard()
    _feed(guard, _training_curve(600, rng) + [_noisy(3.0, rng) for _ in range(50)])
    assert guard.tripped is not None
    guard.reset()
    assert guard.tripped is None and guard.reference is None and guard.observations == 0
    # The restored weights are judged afresh: their level becomes the reference, even if it
    # is well above the level before the rollback.
    assert _feed(guard, [_noisy(1.5, rng) for _ in range(1000)]) == []
    # ...and a real new divergence is still caught.
    assert len(_feed(guard, [_noisy(6.0, rng) for _ in range(100)])) == 1


def test_guard_config_is_validated() -> None:
    with pytest.raises(ValueError, match=r"guard factor 1\.0 must be a finite number > 1"):
        GuardConfig(factor=1.0)
    with pytest.raises(ValueError, match=r"guard reference_window 10 must be >= the window \(20\)"):
        GuardConfig(reference_window=10)
    with pytest.raises(ValueError, match=r"guard warmup 50 must be >= reference_window \(100\)"):
        GuardConfig(warmup=50)
    with pytest.raises(ValueError, match="guard patience 0 must be >= 1"):
        GuardConfig(patience=0)
    with pytest.raises(ValueError, match=r"guard min_rise_fraction -1 must be in \[0, 1\]"):
        GuardConfig(min_rise_fraction=-1)
    with pytest.raises(ValueError, match="guard window 0 must be >= 1"):
        GuardConfig(window=0)
    assert "reference" in GuardConfig().describe()["test"]


# -- the response ----------------------------------------------------------------------------


def _verdict() -> Divergence:
    return Divergence(
        kind=DivergenceKind.LOSS_RISE,
        reason="training loss diverged: median 1.2 is 4.0x the best level 0.3",
        loss=1.2,
        reference=0.3,
        progress=0.6,
        time_s=42.0,
        observations=900,
        healthy_progress=0.55,
    )


def test_first_rollback_continues_under_bsp_with_half_the_learning_rate() -> None:
    decision = rollback_decision(_verdict(), 1.0, MomentumPolicy.SCALE)
    assert isinstance(decision, Rollback)
    assert decision.protocol == BSP
    assert decision.lr_scale == 0.5 and decision.momentum is MomentumPolicy.SCALE
    assert decision.number == 1
    assert decision.reason.startswith("training loss diverged")
    assert "continuing under BSP with learning rate x0.5" in decision.reason
    assert "(rollback 1 of at most 2)" in decision.reason
    record = decision.to_decision().to_plain()
    assert record["action"] == "rollback" and record["policy"] == "divergence_guard"
    assert record["protocol"] == "bsp" and record["progress"] == 0.6


def test_learning_rate_scale_compounds_and_momentum_options() -> None:
    lower = RollbackConfig(max_rollbacks=3, lr_factor=0.5, momentum="lower")
    second = rollback_decision(_verdict(), 0.5, MomentumPolicy.KEEP, lower, rollbacks_done=1)
    assert isinstance(second, Rollback)
    assert second.lr_scale == 0.25 and second.momentum is MomentumPolicy.RAMP
    assert "async momentum ramp (was keep)" in second.reason
    zero = RollbackConfig(lr_factor=1.0, momentum="zero")
    third = rollback_decision(_verdict(), 1.0, MomentumPolicy.KEEP, zero)
    assert isinstance(third, Rollback)
    assert third.lr_scale == 1.0 and third.momentum is MomentumPolicy.ZERO
    assert [lower_momentum(p) for p in MomentumPolicy] == [
        MomentumPolicy.RAMP,  # from keep
        MomentumPolicy.ZERO,  # from scale
        MomentumPolicy.ZERO,  # from zero
        MomentumPolicy.SCALE,  # from ramp
        MomentumPolicy.RAMP,  # from reset: the configured momentum, as keep
    ]


def test_gives_up_after_the_allowed_rollbacks() -> None:
    config = RollbackConfig(max_rollbacks=2)
    decision = rollback_decision(_verdict(), 0.25, MomentumPolicy.SCALE, config, rollbacks_done=2)
    assert isinstance(decision, GiveUp)
    assert decision.reason.endswith("giving up: 2 rollbacks done, limit 2")
    assert decision.to_decision().to_plain()["action"] == "give_up"
    never = rollback_decision(_verdict(), 1.0, MomentumPolicy.SCALE, RollbackConfig(0))
    assert isinstance(never, GiveUp)


def test_rollback_config_is_validated() -> None:
    with pytest.raises(ValueError, match=r"lr_factor 0 must be in \(0, 1\]"):
        RollbackConfig(lr_factor=0)
    with pytest.raises(ValueError, match="max_rollbacks -1 must be an int >= 0"):
        RollbackConfig(max_rollbacks=-1)
    with pytest.raises(ValueError, match="momentum 'less' must be one of unchanged, lower, keep"):
        RollbackConfig(momentum="less")
    with pytest.raises(ValueError, match=r"current lr scale 0\.0 must be"):
        rollback_decision(_verdict(), 0.0, MomentumPolicy.SCALE)


def test_climbing_back_to_the_untrained_loss_is_divergence_below_three_times() -> None:
    """Loss fell only from 2.3 to 1.35, then returned to chance (2.3): 1.7x, yet diverged."""
    rng = random.Random(5)
    learning = [_noisy(1.35 + 0.95 * math.exp(-i / 100), rng, 0.1) for i in range(600)]
    back_to_chance = [_noisy(2.3, rng, 0.1) for _ in range(200)]
    [(index, verdict)] = _feed(DivergenceGuard(), learning + back_to_chance)
    assert verdict.kind is DivergenceKind.LOSS_RISE and index < 600 + 40
    assert verdict.loss < 3 * verdict.reference  # the ratio test alone would not see it
