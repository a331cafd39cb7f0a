"""Configuration policy: learning rate and momentum as pure functions of progress and protocol.

`--lr` is the learning rate of one BSP update, whose global batch is n worker batches. An update
that aggregates k worker gradients uses lr * k / n (linear scaling), so ASP and SSP updates
(k = 1) use lr / n and an elastic barrier over fewer workers uses proportionally less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum


class LrScheduleKind(StrEnum):
    CONSTANT = "constant"
    STEP = "step"
    COSINE = "cosine"


class MomentumPolicy(StrEnum):
    """What momentum an asynchronous phase uses; asynchrony itself acts like extra momentum."""

    KEEP = "keep"  # the configured momentum, unchanged
    SCALE = "scale"  # momentum / n
    ZERO = "zero"
    RAMP = "ramp"  # momentum / n at the switch, then linearly back to momentum
    RESET = "reset"  # the configured momentum, its buffer (Adam: first moment) started afresh


class AsyncLrPolicy(StrEnum):
    """The learning rate of an asynchronous update, which applies one worker's gradient."""

    LINEAR = "linear"  # lr * gradients / workers: BSP's lr over n for one gradient
    NONE = "none"  # BSP's lr as it is (an adaptive optimizer's step is already normalised)


@dataclass(frozen=True)
class LrSchedule:
    kind: LrScheduleKind = LrScheduleKind.CONSTANT
    warmup_fraction: float = 0.0  # linear warmup from 0 over this fraction of training
    milestones: tuple[float, ...] = field(default=(0.5, 0.75))  # for STEP, as fractions
    gamma: float = 0.1  # for STEP: factor applied at each milestone

    def __post_init__(self) -> None:
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"lr warmup fraction {self.warmup_fraction} must be in [0, 1)")
        if any(not 0.0 < m < 1.0 for m in self.milestones):
            raise ValueError(f"lr milestones {self.milestones} must be fractions in (0, 1)")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"lr gamma {self.gamma} must be in (0, 1]")

    def factor(self, progress: float) -> float:
        """Multiplier on the base learning rate at a progress fraction in [0, 1]."""
        progress = min(max(progress, 0.0), 1.0)
        if self.warmup_fraction > 0.0 and progress < self.warmup_fraction:
            return progress / self.warmup_fraction
        if self.kind is LrScheduleKind.STEP:
            return self.gamma ** sum(progress >= m for m in self.milestones)
        if self.kind is LrScheduleKind.COSINE:
            span = 1.0 - self.warmup_fraction
            t = (progress - self.warmup_fraction) / span
            return 0.5 * (1.0 + math.cos(math.pi * t))
        return 1.0


def update_learning_rate(
    base_lr: float, schedule: LrSchedule, progress: float, gradients: int, workers: int
) -> float:
    """Learning rate of one update that aggregates `gradients` of `workers` worker batches."""
    return base_lr * schedule.factor(progress) * gradients / workers


def async_momentum(
    momentum: float,
    policy: MomentumPolicy,
    workers: int,
    progress: float,
    async_start: float,
    ramp_fraction: float,
) -> float:
    """Momentum of an update in an asynchronous phase that began at `async_start`."""
    if policy in (MomentumPolicy.KEEP, MomentumPolicy.RESET):
        return momentum
    if policy is MomentumPolicy.ZERO:
        return 0.0
    scaled = momentum / workers
    if policy is MomentumPolicy.SCALE:
        return scaled
    if ramp_fraction <= 0.0:
        return momentum
    done = min(max((progress - async_start) / ramp_fraction, 0.0), 1.0)
    return scaled + (momentum - scaled) * done
