"""Each component's configuration, built from the job's options: one function per component,
named after what it builds, and the only place that builds it.

core/ may not import config/ (tests/architecture/test_layering.py), so these cannot be
`X.of(options)` classmethods beside the core dataclasses they build; they sit here instead,
one per component. Validation (validation.py) builds the parts it has to parse to check them
(the learning rate schedule, the straggler scenario, the emulation, the fault plan, the
simulator's cluster, the detector) through these functions and keeps them on the config
(`TrainConfig.parsed`); `control.plan.RunPlan.resolve` takes the rest from here and composes
the run's configs. The configs that depend on the run as well as on the job (`SyncConfig`,
`ReliabilityConfig`, `TimingPlan`) are built in control/plan.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from syncswitch.config.files import read_structured_file
from syncswitch.config.options import TrainOptions
from syncswitch.core.cluster.emulation import EmulationConfig, link_network
from syncswitch.core.cluster.model import (
    DEFAULT_STEP_TIME_MS,
    ClusterError,
    ClusterModel,
    ComputeModel,
    parse_cluster,
    preset,
)
from syncswitch.core.reliability.faults import FaultPlan, parse_faults
from syncswitch.core.stragglers.detector import DetectorConfig
from syncswitch.core.stragglers.monitor import StragglerMonitorConfig
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.core.stragglers.scenarios import StragglerScenario, build_scenario
from syncswitch.core.sync.hyperparams import (
    AsyncLrPolicy,
    LrSchedule,
    LrScheduleKind,
    MomentumPolicy,
)
from syncswitch.core.sync.local import LocalConfig, LocalStepsRule, OuterOptimizerKind, StatePolicy
from syncswitch.core.sync.protocol import ONLINE, Schedule
from syncswitch.core.sync.server_optimizer import ADAM_BETAS, OptimizerConfig, OptimizerKind
from syncswitch.core.sync.staleness import StalenessConfig, StalenessLr
from syncswitch.errors import ConfigError

# -- what validation parses (kept on the config: TrainConfig.parsed) ---------------------------


def lr_schedule(options: TrainOptions) -> LrSchedule:
    """The learning rate schedule (core/sync/hyperparams.py)."""
    milestones = tuple(options.lr_milestones) if options.lr_milestones else (0.5, 0.75)
    return LrSchedule(
        kind=LrScheduleKind(options.lr_schedule),
        warmup_fraction=options.warmup,
        milestones=milestones,
        gamma=options.lr_gamma,
    )


def straggler_scenario(options: TrainOptions, schedule: Schedule | None) -> StragglerScenario:
    """The emulated stragglers (core/stragglers/scenarios.py); generated ones are placed in
    the first phase they hold up, one a greedy policy would detour from (BSP; none while the
    schedule is 'auto', `schedule` None)."""
    if not options.stragglers:
        return StragglerScenario()
    phases = schedule.phases if schedule is not None else ()
    bsp_end = next((p.end for p in phases if p.spec.straggler_detour is not None), None)
    return build_scenario(options.stragglers, workers=options.workers, bsp_end=bsp_end)


def emulation_config(
    options: TrainOptions, scenario: StragglerScenario, cluster: ClusterModel | None
) -> EmulationConfig:
    """How step times are emulated (core/cluster/emulation.py). On the simulator (`cluster`
    given) step times are drawn exactly as an emulated Ray worker draws them, from the
    cluster's compute model (and the same straggler scenario)."""
    emulation = EmulationConfig(
        step_time_ms=options.step_time_ms,
        speed_factors=tuple(options.speed_factors or ()),
        jitter_sigma=options.jitter_sigma,
        stragglers=scenario,
        link_gbps=options.link_gbps,
        link_latency_ms=options.link_latency_ms,
        server_link_gbps=options.server_link_gbps,
    )
    if cluster is None:
        return emulation
    compute = cluster.compute
    return replace(
        emulation,
        step_time_ms=compute.step_time_ms,
        jitter_sigma=compute.jitter_sigma,
        speed_factors=compute.speed_factors,
    )


def fault_plan(options: TrainOptions) -> FaultPlan:
    """The injected faults (core/reliability/faults.py)."""
    return parse_faults(options.faults, options.workers)


def cluster_model(options: TrainOptions) -> ClusterModel:
    """The simulator's cluster: --cluster (a preset or a file), with its compute model from
    the emulation flags when the cluster does not give one."""
    where = "cluster"
    if options.cluster is None:
        data: Any = preset("default")
    elif Path(options.cluster).suffix in (".yaml", ".yml", ".toml"):
        data = read_structured_file(options.cluster, "cluster file")
        where = f"cluster file {options.cluster!r}"
    else:
        try:
            data = preset(options.cluster)
        except ClusterError as error:
            raise ConfigError(str(error)) from None
    try:
        model = parse_cluster(data, where)
    except ClusterError as error:
        raise ConfigError(str(error)) from None
    flags = options.step_time_ms > 0 or options.jitter_sigma > 0 or bool(options.speed_factors)
    if isinstance(data, dict) and data.get("compute"):
        if flags:
            raise ConfigError(
                f"{where} gives the compute model (compute: ...), and so do "
                "--step-time-ms/--jitter-sigma/--speed-factors: give it in one place"
            )
    else:
        model = model.with_compute(
            ComputeModel(
                step_time_ms=options.step_time_ms or DEFAULT_STEP_TIME_MS,
                jitter_sigma=options.jitter_sigma,
                speed_factors=tuple(options.speed_factors or ()),
            )
        )
    if options.link_gbps > 0 or options.server_link_gbps > 0:
        flag = "--link-gbps" if options.link_gbps > 0 else "--server-link-gbps"
        if isinstance(data, dict) and data.get("network"):
            raise ConfigError(
                f"{where} gives the network (network: ...), and so does {flag}: give it in "
                "one place"
            )
        network = link_network(options.link_gbps, options.link_latency_ms, options.server_link_gbps)
        notes = {
            **model.notes,
            "network": "the emulated links of --link-gbps and --server-link-gbps (a side "
            "without one unlimited)",
        }
        model = replace(model, network=network, notes=notes)
    factors = model.compute.speed_factors
    if factors and len(factors) != options.workers:
        raise ConfigError(
            f"{where}: compute.speed_factors has {len(factors)} values but workers is "
            f"{options.workers}: give one factor per worker"
        )
    return model


def detector_config(options: TrainOptions) -> DetectorConfig:
    """The straggler detector's settings (its own checks run as it is built)."""
    return DetectorConfig(
        window=options.straggler_window,
        threshold=options.straggler_threshold,
        recover_threshold=options.straggler_recover_threshold,
        min_steps=min(DetectorConfig.min_steps, options.straggler_window),
    )


# -- what the run's components take ------------------------------------------------------------


def straggler_monitor_config(options: TrainOptions) -> StragglerMonitorConfig:
    """How detected stragglers are acted on (core/stragglers/monitor.py): `--straggler-policy`
    (the field keeps its first name, `online_policy`, so that old run directories read)."""
    return StragglerMonitorConfig(
        policy=StragglerPolicyKind(options.online_policy),
        greedy_return=options.greedy_return,
        detector=detector_config(options),
    )


def chooses_follower(options: TrainOptions) -> bool:
    """`--schedule online` alone: the run chooses what follows BSP, ASP or local-H
    (core/timing/follower.py); `bsp:online,asp` names it."""
    return options.schedule.strip().lower() == ONLINE


def local_config(options: TrainOptions) -> LocalConfig:
    """How local-H phases run (core/sync/local.py)."""
    return LocalConfig(
        outer=OuterOptimizerKind(options.outer_optimizer),
        outer_lr=options.outer_lr,
        outer_momentum=options.outer_momentum,
        steps_rule=LocalStepsRule(
            options.local_steps_rule
            or (LocalStepsRule.QSR if chooses_follower(options) else LocalStepsRule.FIXED)
        ),
        inner_state=StatePolicy(options.local_inner_state),
        server_momentum_after=StatePolicy(options.local_server_momentum),
        worker_batch=options.batch_size,
        inner_lr_factor=options.local_lr_factor,
        switch_warmup=options.local_switch_warmup,
        switch_lr_start=options.local_switch_lr_start,
    )


def optimizer_config(options: TrainOptions) -> OptimizerConfig:
    """The server optimizer (core/sync/server_optimizer.py); Adam's beta1 is not here but
    `first_moment_decay`, since the momentum policy changes it per phase."""
    return OptimizerConfig(
        kind=OptimizerKind(options.optimizer),
        weight_decay=options.weight_decay,
        beta2=options.betas[1] if options.betas else ADAM_BETAS[1],
        eps=options.eps,
        max_grad_norm=options.grad_clip,
    )


def momentum_policy(options: TrainOptions) -> MomentumPolicy:
    """`--momentum-at-switch`, or the optimizer's default: SGD scales its momentum (with
    BSP's kept, ASP diverges: the paper's F5); Adam keeps beta1, which measured best at
    BSP's learning rate (docs/optimizers.md)."""
    if options.momentum_at_switch is not None:
        return MomentumPolicy(options.momentum_at_switch)
    if options.optimizer == OptimizerKind.SGD:
        return MomentumPolicy.SCALE
    return MomentumPolicy.KEEP


def async_lr_policy(options: TrainOptions) -> AsyncLrPolicy:
    """`--async-lr`, or the optimizer's default: an Adam step's length does not grow with
    the gradient, and one at BSP's lr over the workers leaves ASP far behind (measured:
    docs/optimizers.md), so Adam keeps BSP's lr; SGD takes its linear share."""
    if options.async_lr is not None:
        return AsyncLrPolicy(options.async_lr)
    if options.optimizer == OptimizerKind.SGD:
        return AsyncLrPolicy.LINEAR
    return AsyncLrPolicy.NONE


def first_moment_decay(options: TrainOptions) -> float:
    """SGD's momentum, or Adam's beta1: what BSP uses and the momentum policy acts on."""
    if options.optimizer == OptimizerKind.SGD:
        return options.momentum
    return options.betas[0] if options.betas else ADAM_BETAS[0]


def staleness_config(options: TrainOptions) -> StalenessConfig:
    """The staleness rules of ASP/SSP updates (core/sync/staleness.py)."""
    return StalenessConfig(
        lr_rule=StalenessLr(options.staleness_lr),
        lr_floor=options.staleness_lr_floor,
        delay_compensation=options.delay_compensation,
    )
