import math

import pytest

from syncswitch.core.sync.hyperparams import (
    LrSchedule,
    LrScheduleKind,
    MomentumPolicy,
    async_momentum,
    update_learning_rate,
)


def test_linear_scaling_follows_the_gradients_per_update() -> None:
    constant = LrSchedule()
    assert update_learning_rate(0.8, constant, 0.3, gradients=8, workers=8) == 0.8
    assert update_learning_rate(0.8, constant, 0.3, gradients=1, workers=8) == pytest.approx(0.1)
    assert update_learning_rate(0.8, constant, 0.3, gradients=6, workers=8) == pytest.approx(0.6)


def test_schedules_are_functions_of_progress() -> None:
    step = LrSchedule(kind=LrScheduleKind.STEP, milestones=(0.5, 0.75), gamma=0.1)
    assert step.factor(0.49) == 1.0
    assert step.factor(0.5) == pytest.approx(0.1)
    assert step.factor(0.9) == pytest.approx(0.01)
    cosine = LrSchedule(kind=LrScheduleKind.COSINE)
    assert cosine.factor(0.0) == 1.0
    assert cosine.factor(0.5) == pytest.approx(0.5)
    assert cosine.factor(1.0) == pytest.approx(0.0, abs=1e-12)
    warm = LrSchedule(kind=LrScheduleKind.COSINE, warmup_fraction=0.1)
    assert warm.factor(0.05) == pytest.approx(0.5)
    assert warm.factor(0.1) == pytest.approx(1.0)
    assert warm.factor(0.55) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))


def test_momentum_policies() -> None:
    def momentum(policy: MomentumPolicy, progress: float = 0.3) -> float:
        return async_momentum(0.9, policy, 8, progress, async_start=0.25, ramp_fraction=0.1)

    assert momentum(MomentumPolicy.KEEP) == 0.9
    assert momentum(MomentumPolicy.SCALE) == pytest.approx(0.9 / 8)
    assert momentum(MomentumPolicy.ZERO) == 0.0
    assert momentum(MomentumPolicy.RAMP, 0.25) == pytest.approx(0.9 / 8)
    assert momentum(MomentumPolicy.RAMP, 0.30) == pytest.approx(0.9 / 8 + (0.9 - 0.9 / 8) / 2)
    assert momentum(MomentumPolicy.RAMP, 0.50) == pytest.approx(0.9)


def test_bad_schedule_values_are_refused() -> None:
    with pytest.raises(ValueError, match="warmup"):
        LrSchedule(warmup_fraction=1.5)
    with pytest.raises(ValueError, match="milestones"):
        LrSchedule(kind=LrScheduleKind.STEP, milestones=(1.2,))
