"""The job resolved once into the frozen configurations each component takes.

`TrainConfig` is what the user wrote (flags, files); a `RunPlan` is what runs: the schedule
parsed, the emulation, fault plan and straggler scenario built, the workload counted in
samples. Everything downstream reads the plan, so nothing is parsed twice and every part of
the run sees the same values.

`RunPlan.resolve` only composes: each component's config is built in one place, by the
function named after it in config/components.py (what the options alone decide) or here
(`sync_config`, `ReliabilityConfig.of`, `TimingPlan.of`: what the run decides too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from syncswitch.config import ConfigError, TrainConfig
from syncswitch.config.components import (
    async_lr_policy,
    first_moment_decay,
    local_config,
    momentum_policy,
    optimizer_config,
    staleness_config,
    straggler_monitor_config,
)
from syncswitch.core.cluster.emulation import EmulationConfig
from syncswitch.core.cluster.model import ClusterModel
from syncswitch.core.reliability.divergence import RollbackConfig
from syncswitch.core.reliability.faults import FaultPlan
from syncswitch.core.stragglers.monitor import StragglerMonitorConfig
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.protocol import BSP, Schedule
from syncswitch.core.sync.wire_dtype import WireDtype
from syncswitch.core.timing.rules import Rule, ShareBounds, make_rule, rule_threshold, uses_losses
from syncswitch.records.metric import DEFAULT, MetricSpec


@dataclass(frozen=True)
class ReliabilityConfig:
    checkpoint_every_s: float  # timed checkpoints; 0 = off
    worker_timeout_s: float  # silent this long (not held by a server): hung
    max_worker_restarts: int
    divergence_guard: bool
    rollback: RollbackConfig

    @classmethod
    def of(cls, config: TrainConfig) -> ReliabilityConfig:
        return cls(
            checkpoint_every_s=config.checkpoint_every_s,
            worker_timeout_s=config.worker_timeout_s,
            max_worker_restarts=config.max_worker_restarts,
            divergence_guard=config.divergence_guard,
            rollback=RollbackConfig(lr_factor=config.rollback_lr_factor),
        )


# The estimator's half-life, as a fraction of the run's BSP rounds, and how often the rule is
# asked (benchmarks/results/online-timing-study.md: the settings the rule was tuned with).
HALF_LIFE_FRACTION = 0.02
# Coordinates of each shard's slice the statistics are measured on: a fixed random subset of
# this many, when the slice has more than twice as many (docs/performance.md: what measuring
# every coordinate costs, and this subset).
STATS_COORDINATES = 4096
CHECK_EVERY = 0.005
# A measured round costs nearly the same whatever n is (a handful of torch calls: their fixed
# cost, not the arithmetic, dominates at small models), while a server's round costs about n
# gradients' work, so rounds are measured one in `every` (in pairs), with every * n about
# STATS_ROUND_WORKERS (docs/performance.md: the cost against the server's round), but never
# so sparse that the estimator takes in fewer than MEASURED_PER_HALF_LIFE measured rounds per
# half-life (benchmarks/results/online-timing-study.md: cost against noise). Every worker's
# gradient is squared (STATS_WORKERS 0): a rotating subset costs more calls than it saves
# arithmetic at cnn1d's size and makes the noise estimate noisier (docs/performance.md).
STATS_WORKERS = 0
STATS_ROUND_WORKERS = 32
MEASURED_PER_HALF_LIFE = 12


def stats_every(workers: int, half_life_rounds: float) -> int:
    """One BSP round in how many the shards measure (see STATS_ROUND_WORKERS)."""
    for_cost = -(-STATS_ROUND_WORKERS // workers)  # ceil
    for_noise = int(half_life_rounds // MEASURED_PER_HALF_LIFE)
    return max(min(for_cost, for_noise), 1)


def runs_on_one_machine(config: TrainConfig) -> bool:
    """Whether every process of the run is on this machine, with nothing between them but
    host CPU: Ray's local instance (no --ray-address or RAY_ADDRESS names a cluster to join)
    and no emulated link (--link-gbps or --server-link-gbps puts a network between the
    workers and the servers). The simulator's cluster model places its workers itself."""
    local = config.runtime == "ray" and not (config.ray_address or os.environ.get("RAY_ADDRESS"))
    return local and config.link_gbps == 0 and config.server_link_gbps == 0


@dataclass(frozen=True)
class TimingPlan:
    """How the run decides when its online phase ends (control/timing.py)."""

    rule: Rule
    bounds: ShareBounds  # the floor (at least the phase's start) and the ceiling
    workers: int  # the run's workers: the staleness an ASP gradient would carry (n - 1)
    half_life_rounds: float  # the estimator's smoothing, in measured BSP rounds
    check_every: float = CHECK_EVERY  # a point of history each time progress crosses this
    stats_every: int = 1  # the shards measure one BSP round in this many
    # `--schedule online` alone: the run chooses what follows BSP (core/timing/follower.py).
    chooses_follower: bool = False
    # Every worker on the server's machine (a local Ray instance): ASP follows, whatever the
    # measured message cost (core/timing/follower.py).
    one_machine: bool = False

    @classmethod
    def of(cls, config: TrainConfig, schedule: Schedule, total_samples: int) -> TimingPlan:
        start, ceiling = schedule.online_window()
        rounds = total_samples / (config.workers * config.batch_size)
        every = stats_every(config.workers, HALF_LIFE_FRACTION * rounds)
        return cls(
            rule=make_rule(config.switch_rule, config.switch_threshold),
            bounds=ShareBounds(
                floor=min(max(config.switch_floor, start), ceiling), ceiling=ceiling
            ),
            workers=config.workers,
            half_life_rounds=max(HALF_LIFE_FRACTION * rounds / every, 1.0),
            stats_every=every,
            chooses_follower=config.chooses_follower,
            one_machine=runs_on_one_machine(config),
        )

    def describe(self) -> dict[str, Any]:
        return {
            "rule": self.rule.name,
            "threshold": rule_threshold(self.rule),
            "floor": self.bounds.floor,
            "ceiling": self.bounds.ceiling,
            "half_life_rounds": round(self.half_life_rounds, 3),
            "check_every": self.check_every,
            "stats_every": self.stats_every,
            "chooses_follower": self.chooses_follower,
        }


@dataclass(frozen=True)
class RunPlan:
    job: TrainConfig  # as given (frozen, so shared), for config.json and the summary
    total_samples: int
    schedule: Schedule
    sync: SyncConfig
    emulation: EmulationConfig
    faults: FaultPlan
    # How stragglers are detected and acted on; None: they are neither emulated nor acted on.
    stragglers: StragglerMonitorConfig | None
    reliability: ReliabilityConfig
    runtime: str = "ray"  # "ray": measured (or emulated) wall time; "sim": a simulated clock
    cluster: ClusterModel | None = None  # the simulator's cluster model (None on Ray)
    timing: TimingPlan | None = None  # how an online phase's end is decided; None: no such phase
    metric: MetricSpec = DEFAULT  # what the run is judged by, on which split
    # A language model's target positions per sample (summary.json's tokens_per_s); None
    # for other jobs.
    tokens_per_sample: int | None = None

    @classmethod
    def resolve(
        cls, config: TrainConfig, train_samples: int, metric: MetricSpec | None = None
    ) -> RunPlan:
        """The plan of `config` (validated when it was built: its schedule, cluster, fault
        plan and scenario are taken as it parsed them, not parsed again)."""
        total_samples = round(config.epochs * train_samples)
        _check_eval_floor(config, total_samples)
        schedule = config.parsed_schedule()
        timing = (
            TimingPlan.of(config, schedule, total_samples)
            if schedule.online_index is not None
            else None
        )
        return cls(
            job=config,
            total_samples=total_samples,
            schedule=schedule,
            sync=sync_config(config, schedule, total_samples, timing),
            # On the simulator, step times from its cluster's compute model
            # (components.emulation_config).
            emulation=config.parsed.emulation,
            faults=config.parsed.faults,
            stragglers=(straggler_monitor_config(config) if config.watches_stragglers else None),
            reliability=ReliabilityConfig.of(config),
            runtime=config.runtime,
            cluster=config.parsed.cluster,  # the simulator's; None on Ray
            timing=timing,
            metric=metric or DEFAULT,
        )

    @property
    def simulated(self) -> bool:
        return self.runtime == "sim"

    def timing_label(self) -> dict[str, Any]:
        """What a run's times are, for config.json and every result file's readers."""
        if self.cluster is not None:
            return {
                "enabled": True,
                "kind": "SIMULATED: times are seconds of a simulated clock, from the cluster "
                "model; gradients and accuracy are real",
                "cluster": self.cluster.describe(),
                "stragglers": self.emulation.stragglers.describe() or "none",
            }
        return self.emulation.describe()

    @property
    def workers(self) -> int:
        return self.sync.workers

    @property
    def straggler_policy_name(self) -> str | None:
        """The straggler policy's name as its decisions carry it, or None without one."""
        if self.stragglers is None:
            return None
        if self.stragglers.greedy_return:
            return "greedy+return"
        return self.stragglers.policy.value

    @property
    def planned_bsp_fraction(self) -> float:
        phases = self.schedule.phases
        starts = [0.0, *(p.end for p in phases[:-1])]
        return sum(p.end - a for p, a in zip(phases, starts, strict=True) if p.spec == BSP)


def sync_config(
    config: TrainConfig, schedule: Schedule, total_samples: int, timing: TimingPlan | None
) -> SyncConfig:
    """The synchronizer's configuration (core/sync/config.py): the job's update rule, and
    what the shards measure for the timing plan (statistics only for a rule that reads them).
    Built here, not in config/components.py, since it depends on the run's timing plan."""
    return SyncConfig(
        workers=config.workers,
        total_samples=total_samples,
        schedule=schedule,
        lr=config.lr,
        momentum=first_moment_decay(config),
        momentum_policy=momentum_policy(config),
        async_lr=async_lr_policy(config),
        optimizer=optimizer_config(config),
        momentum_ramp_fraction=config.momentum_ramp,
        lr_schedule=config.parsed.lr_schedule,
        eval_every=config.eval_every,
        count_bsp_by_work=config.greedy_return,
        checkpoint_every=config.checkpoint_every,
        local=local_config(config),
        staleness=staleness_config(config),
        wire_dtype=WireDtype(config.wire_dtype),
        stats_coordinates=(
            STATS_COORDINATES if timing is not None and not uses_losses(timing.rule) else None
        ),
        stats_every=timing.stats_every if timing is not None else 1,
        stats_workers=STATS_WORKERS,
    )


# Evaluations one step may trigger (each crossed multiple of eval_every is one, of the same
# weights). A tiny smoke-test job (a step of the whole dataset, eval_every 0.05) does 20.
MAX_EVALUATIONS_PER_STEP = 100


def _check_eval_floor(config: TrainConfig, total_samples: int) -> None:
    """An evaluation interval far below one step would evaluate the same weights hundreds or
    thousands of times (each evaluation copies the weights and runs the test set): one line
    instead."""
    if total_samples <= 0:
        return
    step_fraction = min(config.batch_size / total_samples, 1.0)
    floor = step_fraction / MAX_EVALUATIONS_PER_STEP
    if config.eval_every < floor:
        raise ConfigError(
            f"eval_every = {config.eval_every:g} is far shorter than one step (batch_size "
            f"{config.batch_size} of {total_samples} training samples = {step_fraction:.3g} of "
            f"training): each step would evaluate the same weights "
            f"{step_fraction / config.eval_every:.0f} times; it must be at least {floor:.3g}"
        )
