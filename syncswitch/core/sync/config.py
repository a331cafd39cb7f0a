"""The synchronizer's configuration, and what its schedule says of a phase's end."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from syncswitch.core.sync.hyperparams import AsyncLrPolicy, LrSchedule, MomentumPolicy
from syncswitch.core.sync.local import LocalConfig
from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.sync.server_optimizer import OptimizerConfig
from syncswitch.core.sync.staleness import StalenessConfig
from syncswitch.core.sync.wire_dtype import WireDtype


@dataclass(frozen=True)
class SyncConfig:
    workers: int
    total_samples: int
    schedule: Schedule
    lr: float  # learning rate of one BSP update (global batch = workers x worker batch)
    momentum: float = 0.9  # SGD's momentum, or Adam's beta1: what the momentum policy acts on
    momentum_policy: MomentumPolicy = MomentumPolicy.SCALE
    momentum_ramp_fraction: float = 0.1
    lr_schedule: LrSchedule = LrSchedule()
    async_lr: AsyncLrPolicy = AsyncLrPolicy.LINEAR
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    eval_every: float = 0.05  # evaluate each time progress crosses a multiple of this
    count_bsp_by_work: bool = False  # a BSP phase ends on its planned BSP samples, not progress
    checkpoint_every: float = 0.0  # snapshot each time progress crosses a multiple; 0 = off
    quarantine_after: int = 3  # consecutive bad gradients that quarantine a worker
    # Coordinates of this slice the gradient statistics are measured on, while a phase whose
    # end the run decides is in force (0: all; None: not measured; see gradient_stats.py).
    stats_coordinates: int | None = None
    stats_every: int = 1  # measure one BSP round in this many (in pairs, for the drift)
    stats_workers: int = 0  # square this many workers' gradients per measured round (0: all)
    local: LocalConfig = field(default_factory=LocalConfig)  # local-H phases (core/sync/local.py)
    # ASP/SSP updates' staleness rules (core/sync/staleness.py); none by default.
    staleness: StalenessConfig = field(default_factory=StalenessConfig)
    # What messages' values are rounded to on the way (core/sync/wire_dtype.py).
    wire_dtype: WireDtype = WireDtype.FLOAT32
    # This shard and how many there are: a clipped BSP round's norm is all shards' (clipping.py).
    shard: int = 0
    shards: int = 1

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.total_samples < 1:
            raise ValueError(f"total_samples must be >= 1, got {self.total_samples}")

    def progress(self, samples: int) -> float:
        """The fraction of the workload `samples` applied samples stand for (at most 1)."""
        return min(samples / self.total_samples, 1.0)

    def active(self, excluded: Set[int]) -> frozenset[int]:
        """The workers the BSP barrier and the SSP bound wait for: all but `excluded`."""
        return frozenset(range(self.workers)) - excluded


def scheduled_phase(config: SyncConfig, index: int, progress: float, phase_bsp_samples: int) -> int:
    """The schedule's phase after an update: `index` (the current one) or a later one, past
    every phase that has ended. A BSP phase counted by work ends when its planned samples have
    been applied under BSP (`phase_bsp_samples` so far in the current phase)."""
    phases = config.schedule.phases
    current = index
    while index < len(phases) - 1:
        phase = phases[index]
        if phase.online:
            # Ended by the run controller (`end_online_phase`), or here at its ceiling: a
            # detour through ASP does not postpone it.
            finished = progress >= phase.end
        elif config.count_bsp_by_work and phase.spec.straggler_detour is not None:
            start = phases[index - 1].end if index else 0.0
            planned = (phase.end - start) * config.total_samples
            # A phase entered late (after an earlier detour) still gets its planned BSP work.
            done = phase_bsp_samples if index == current else 0
            finished = done >= planned - 1e-9
        else:
            finished = progress >= phase.end
        if not finished:
            break
        index += 1
    return index


def check_worker(worker: int, workers: int) -> None:
    if not 0 <= worker < workers:
        raise ValueError(f"worker {worker} out of range 0..{workers - 1}")
