"""Emulated device time, so one small machine can stand in for a cluster of GPU workers.

A worker pads each step up to an emulated device time (a sleep, which uses no CPU) drawn from
this model: base step time x the worker's speed factor x mean-one lognormal jitter. Real
gradients are still computed inside that time. With emulation off the same worker code runs
unchanged on real hardware. Every result file records the model through `describe()`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from syncswitch.core.stragglers.scenarios import StragglerScenario


@dataclass(frozen=True)
class EmulationConfig:
    step_time_ms: float = 0.0  # 0 turns emulation off
    speed_factors: tuple[float, ...] = ()  # per worker; empty means all 1.0
    jitter_sigma: float = 0.0  # sigma of the mean-one lognormal multiplier; 0 = no jitter
    stragglers: StragglerScenario = field(default_factory=StragglerScenario)

    def __post_init__(self) -> None:
        if self.step_time_ms < 0:
            raise ValueError(f"emulated step time {self.step_time_ms} ms must be >= 0")
        if any(f <= 0 for f in self.speed_factors):
            raise ValueError(f"speed factors {self.speed_factors} must all be > 0")
        if self.jitter_sigma < 0:
            raise ValueError(f"jitter sigma {self.jitter_sigma} must be >= 0")

    @property
    def enabled(self) -> bool:
        """Whether any step time is emulated: a device time, or transient stragglers."""
        return self.step_time_ms > 0 or bool(self.stragglers.episodes)

    def speed_factor(self, worker: int) -> float:
        return self.speed_factors[worker] if self.speed_factors else 1.0

    def describe(self) -> dict[str, Any]:
        if not self.enabled:
            return {"enabled": False}
        return {
            "enabled": True,
            "kind": (
                "emulated device time per step: the real gradient is computed inside it and "
                "applied by the server when the step's time has elapsed"
            ),
            "step_time_ms": self.step_time_ms or "off (real compute time)",
            "speed_factors": list(self.speed_factors) or "all 1.0",
            "jitter": (
                f"lognormal, sigma={self.jitter_sigma}, mean 1" if self.jitter_sigma else "none"
            ),
            "stragglers": self.stragglers.describe() or "none",
        }


class StepTimeModel:
    """Draws one worker's emulated device time per step, reproducibly from a seed."""

    def __init__(self, config: EmulationConfig, worker: int, seed: int) -> None:
        self._config = config
        self._factor = config.speed_factor(worker)
        self._rng = random.Random(seed * 1_000_003 + worker)

    def next_step_s(self) -> float:
        cfg = self._config
        if cfg.step_time_ms <= 0:
            return 0.0
        jitter = 1.0
        if cfg.jitter_sigma > 0:
            # mu = -sigma^2/2 makes the multiplier's mean exactly 1.
            sigma = cfg.jitter_sigma
            jitter = math.exp(self._rng.gauss(-0.5 * sigma * sigma, sigma))
        return cfg.step_time_ms / 1000.0 * self._factor * jitter
