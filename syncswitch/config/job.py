"""The training job's configuration: its options (options.py), validated once, when it is
built.

`TrainConfig` is `TrainOptions` with its checks: each field's own (its declaration: checks.py)
and what relates fields to each other (validation.py). What validation parses (the schedule,
the cluster file, the straggler scenario, the fault plan) is kept on the config, so nothing
parses it again: `control.plan.RunPlan.resolve` assembles the run's per-component configs
from these parts. A changed job is a new config (`dataclasses.replace`, or `with_schedule`),
validated once itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syncswitch.config.checks import check_field
from syncswitch.config.files import read_structured_file
from syncswitch.config.limits import DEFAULT_MODEL
from syncswitch.config.options import TrainOptions
from syncswitch.config.validation import (
    STALENESS_OPTIONS,
    SWITCH_OPTIONS,
    Parsed,
    StalenessOptionsError,
    SwitchOptionsError,
    detector_config,
    is_auto,
    role_devices,
    validate_job,
)
from syncswitch.core.cluster.emulation import EmulationConfig
from syncswitch.core.cluster.model import (
    DEFAULT_STEP_TIME_MS,
    ClusterError,
    ClusterModel,
    ComputeModel,
    parse_cluster,
    preset,
)
from syncswitch.core.reliability.faults import FaultPlan
from syncswitch.core.stragglers.detector import DetectorConfig
from syncswitch.core.stragglers.monitor import StragglerMonitorConfig
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.core.stragglers.scenarios import StragglerScenario
from syncswitch.core.sync.hyperparams import AsyncLrPolicy, LrSchedule, MomentumPolicy
from syncswitch.core.sync.local import LocalConfig, LocalStepsRule, OuterOptimizerKind, StatePolicy
from syncswitch.core.sync.protocol import ONLINE, Schedule
from syncswitch.core.sync.server_optimizer import (
    ADAM_BETAS,
    OptimizerConfig,
    OptimizerKind,
    default_lr,
)
from syncswitch.core.sync.staleness import StalenessConfig, StalenessLr
from syncswitch.errors import ConfigError


@dataclass(frozen=True)
class TrainConfig(TrainOptions):
    """A training job: every option (see TrainOptions), checked once when it is built."""

    if TYPE_CHECKING:
        # Set once by __post_init__ (the dataclass is frozen); not a field at run time, and
        # init=False tells the type checker it is none of the constructor's arguments.
        _parsed: Parsed = field(init=False)

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        """Every field against its declaration, then what relates fields to each other
        (validation.py); what is parsed on the way is kept (`_parsed`)."""
        if self.lr is None:  # the optimizer's own default; a known optimizer is checked below
            object.__setattr__(self, "lr", default_lr(self.optimizer))
        for f in fields(self):
            check_field(f, getattr(self, f.name))
        object.__setattr__(self, "_parsed", validate_job(self, self._build_cluster))

    def with_schedule(self, schedule: str, **changes: Any) -> TrainConfig:
        """This job under another schedule (and `changes`); switch options that a schedule
        with no online END makes moot, and staleness options that one with no ASP/SSP phase
        makes moot (a search's BSP baseline), are set aside (back to their defaults), not
        refused."""
        aside: dict[str, Any] = {}
        while True:
            try:
                return replace(self, schedule=schedule, **{**aside, **changes})
            except (SwitchOptionsError, StalenessOptionsError) as error:
                switch = isinstance(error, SwitchOptionsError)
                moot = SWITCH_OPTIONS if switch else STALENESS_OPTIONS
                if all(name in aside for name in moot):
                    raise
                aside |= {f.name: f.default for f in fields(self) if f.name in moot}

    # -- what validation built, and views derived from the fields -----------------------------

    def role_devices(self) -> dict[str, str]:
        """Each role's device as asked ('auto' still to be resolved against the cluster)."""
        return role_devices(self)

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL[self.dataset]

    @property
    def schedule_is_auto(self) -> bool:
        return is_auto(self.schedule)

    @property
    def chooses_follower(self) -> bool:
        """`--schedule online` alone: the run chooses what follows BSP, ASP or local-H
        (core/timing/follower.py); `bsp:online,asp` names it."""
        return self.schedule.strip().lower() == ONLINE

    def parsed_schedule(self) -> Schedule:
        if self._parsed.schedule is None:
            raise ConfigError(
                "schedule 'auto' must be resolved before training: use `syncswitch train` or "
                "syncswitch.recurring.resolve_auto_schedule(config)"
            )
        return self._parsed.schedule

    def lr_schedule_spec(self) -> LrSchedule:
        return self._parsed.lr_schedule

    def emulation(self) -> EmulationConfig:
        return self._parsed.emulation

    def fault_plan(self) -> FaultPlan:
        return self._parsed.faults

    def scenario(self) -> StragglerScenario:
        return self._parsed.scenario

    def cluster_model(self) -> ClusterModel:
        """The simulator's cluster: --cluster (a preset or a file), with its compute model
        from the emulation flags when the cluster does not give one."""
        return self._parsed.cluster or self._build_cluster()

    def local_config(self) -> LocalConfig:
        """How local-H phases run (core/sync/local.py)."""
        return LocalConfig(
            outer=OuterOptimizerKind(self.outer_optimizer),
            outer_lr=self.outer_lr,
            outer_momentum=self.outer_momentum,
            steps_rule=LocalStepsRule(
                self.local_steps_rule
                or (LocalStepsRule.QSR if self.chooses_follower else LocalStepsRule.FIXED)
            ),
            inner_state=StatePolicy(self.local_inner_state),
            server_momentum_after=StatePolicy(self.local_server_momentum),
            worker_batch=self.batch_size,
            inner_lr_factor=self.local_lr_factor,
            switch_warmup=self.local_switch_warmup,
            switch_lr_start=self.local_switch_lr_start,
        )

    def optimizer_config(self) -> OptimizerConfig:
        """The server optimizer (core/sync/server_optimizer.py); Adam's beta1 is not here but
        `first_moment_decay`, since the momentum policy changes it per phase."""
        return OptimizerConfig(
            kind=OptimizerKind(self.optimizer),
            weight_decay=self.weight_decay,
            beta2=self.betas[1] if self.betas else ADAM_BETAS[1],
            eps=self.eps,
            max_grad_norm=self.grad_clip,
        )

    def switch_momentum_policy(self) -> MomentumPolicy:
        """`--momentum-at-switch`, or the optimizer's default: SGD scales its momentum (with
        BSP's kept, ASP diverges: the paper's F5); Adam keeps beta1, which measured best at
        BSP's learning rate (docs/optimizers.md)."""
        if self.momentum_at_switch is not None:
            return MomentumPolicy(self.momentum_at_switch)
        if self.optimizer == OptimizerKind.SGD:
            return MomentumPolicy.SCALE
        return MomentumPolicy.KEEP

    def async_lr_policy(self) -> AsyncLrPolicy:
        """`--async-lr`, or the optimizer's default: an Adam step's length does not grow with
        the gradient, and one at BSP's lr over the workers leaves ASP far behind (measured:
        docs/optimizers.md), so Adam keeps BSP's lr; SGD takes its linear share."""
        if self.async_lr is not None:
            return AsyncLrPolicy(self.async_lr)
        if self.optimizer == OptimizerKind.SGD:
            return AsyncLrPolicy.LINEAR
        return AsyncLrPolicy.NONE

    def first_moment_decay(self) -> float:
        """SGD's momentum, or Adam's beta1: what BSP uses and the momentum policy acts on."""
        if self.optimizer == OptimizerKind.SGD:
            return self.momentum
        return self.betas[0] if self.betas else ADAM_BETAS[0]

    def staleness_config(self) -> StalenessConfig:
        """The staleness rules of ASP/SSP updates (core/sync/staleness.py)."""
        return StalenessConfig(
            lr_rule=StalenessLr(self.staleness_lr),
            lr_floor=self.staleness_lr_floor,
            delay_compensation=self.delay_compensation,
        )

    def detector_config(self) -> DetectorConfig:
        return detector_config(self)

    def online(self) -> StragglerMonitorConfig:
        return StragglerMonitorConfig(
            policy=StragglerPolicyKind(self.online_policy),
            greedy_return=self.greedy_return,
            detector=self.detector_config(),
        )

    @property
    def watches_stragglers(self) -> bool:
        """Whether the run detects stragglers: a policy acts on them or they are emulated."""
        return self.online_policy != StragglerPolicyKind.NONE or bool(self.stragglers)

    def to_plain(self) -> dict[str, Any]:
        return asdict(self)

    # -- the simulator's cluster (built once, from _validate) ---------------------------------

    def _build_cluster(self) -> ClusterModel:
        where = "cluster"
        if self.cluster is None:
            data: Any = preset("default")
        elif Path(self.cluster).suffix in (".yaml", ".yml", ".toml"):
            data = read_structured_file(self.cluster, "cluster file")
            where = f"cluster file {self.cluster!r}"
        else:
            try:
                data = preset(self.cluster)
            except ClusterError as error:
                raise ConfigError(str(error)) from None
        try:
            model = parse_cluster(data, where)
        except ClusterError as error:
            raise ConfigError(str(error)) from None
        flags = self.step_time_ms > 0 or self.jitter_sigma > 0 or bool(self.speed_factors)
        if isinstance(data, dict) and data.get("compute"):
            if flags:
                raise ConfigError(
                    f"{where} gives the compute model (compute: ...), and so do "
                    "--step-time-ms/--jitter-sigma/--speed-factors: give it in one place"
                )
        else:
            model = model.with_compute(
                ComputeModel(
                    step_time_ms=self.step_time_ms or DEFAULT_STEP_TIME_MS,
                    jitter_sigma=self.jitter_sigma,
                    speed_factors=tuple(self.speed_factors or ()),
                )
            )
        factors = model.compute.speed_factors
        if factors and len(factors) != self.workers:
            raise ConfigError(
                f"{where}: compute.speed_factors has {len(factors)} values but workers is "
                f"{self.workers}: give one factor per worker"
            )
        return model
