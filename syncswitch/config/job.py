"""The training job's configuration: one frozen dataclass, validated once, when it is built.

Every field is also a `syncswitch train` flag (underscores become dashes) and a key of a
`--config` YAML/TOML file, so the three ways of setting a value cannot drift apart. Each
field declares its own checks (`choices=`, `range=`; see checks.py); what relates fields to
each other is checked in `_validate`. What validation parses (the schedule, the cluster file,
the straggler scenario, the fault plan) is kept on the config, so nothing parses it again:
`control.plan.RunPlan.resolve` assembles the run's per-component configs from these parts.
A changed job is a new config (`dataclasses.replace`), validated once itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syncswitch.cluster_address import parse_cluster_address
from syncswitch.config.checks import Range, check_field
from syncswitch.config.files import read_structured_file
from syncswitch.config.limits import (
    AUTO_SCHEDULE,
    CIFAR_TRAIN_SAMPLES,
    DATASETS,
    DEFAULT_MODEL,
    DEVICES,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_GPUS_PER_ACTOR,
    MAX_JITTER_SIGMA,
    MAX_MNIST1D_SAMPLES,
    MAX_OUTER_LR,
    MAX_SECONDS,
    MAX_SEED,
    MAX_SERVERS,
    MAX_SPEED_FACTOR,
    MAX_STEP_TIME_MS,
    MAX_STRAGGLER_WINDOW,
    MAX_SWITCH_THRESHOLD,
    MAX_TOTAL_SAMPLES,
    MAX_WORKER_RESTARTS,
    MAX_WORKERS,
    MIN_EVERY_FRACTION,
    MODELS,
    PLACEMENTS,
    RUNTIMES,
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
from syncswitch.core.reliability.faults import FaultPlan, parse_faults
from syncswitch.core.stragglers.detector import DetectorConfig
from syncswitch.core.stragglers.monitor import StragglerMonitorConfig
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.core.stragglers.scenarios import StragglerScenario, build_scenario
from syncswitch.core.sync.hyperparams import LrSchedule, LrScheduleKind, MomentumPolicy
from syncswitch.core.sync.local import LocalConfig, LocalStepsRule, OuterOptimizerKind, StatePolicy
from syncswitch.core.sync.protocol import Protocol, Schedule, ScheduleError
from syncswitch.core.timing.rules import RULE_NAMES
from syncswitch.errors import ConfigError
from syncswitch.loggers import LOGGERS
from syncswitch.loggers import missing_packages as missing_logger_packages


def _opt(default: Any, help: str, **extra: Any) -> Any:
    return field(default=default, metadata={"help": help, **extra})


@dataclass(frozen=True)
class _Parsed:
    """What validating a config parsed, kept so that nothing parses it again."""

    schedule: Schedule | None  # None: 'auto', still to be resolved
    lr_schedule: LrSchedule
    scenario: StragglerScenario
    emulation: EmulationConfig
    faults: FaultPlan
    cluster: ClusterModel | None  # the simulator's; None on Ray


@dataclass(frozen=True)
class TrainConfig:
    # The job: what is trained, by how many workers, under which protocols.
    workers: int = _opt(
        8, "number of worker actors (data-parallel replicas)", range=Range(1, MAX_WORKERS)
    )
    servers: int = _opt(
        1,
        "parameter-server actors; parameters are sharded evenly over them",
        range=Range(1, MAX_SERVERS),
    )
    schedule: str = _opt(
        "online",
        "protocol phases PROTOCOL[:END],...: PROTOCOL is bsp, asp, ssp-S or local-H (H local "
        "steps per worker between rounds of model deltas, docs/local-updates.md); END is the "
        "fraction of total training samples where the phase ends; the last phase runs to the end; "
        "END 'online' (bsp:online,asp; 'online' alone says that, and is the default): the run "
        "decides when to leave BSP, by --switch-rule, between --switch-floor and --switch-ceiling; "
        "'auto': this job's stored switch point (from `syncswitch search` or an online run), "
        "else online",
    )
    switch_rule: str = _opt(
        "staleness",
        "for an END 'online': staleness (leave BSP once the error staleness would add under ASP "
        "falls below --switch-threshold times the gradient's sampling noise), noise-scale (once "
        "the gradient noise scale exceeds --switch-threshold times the global batch) or plateau "
        "(once the test loss improves by less than --switch-threshold, relative, per 0.1 of "
        "training)",
        choices=list(RULE_NAMES),
    )
    switch_threshold: float | None = _opt(
        None,
        "the switch rule's threshold (default: the rule's own, 0.15 staleness, 2 noise-scale, "
        "0.05 plateau)",
        range=Range(0, MAX_SWITCH_THRESHOLD, low_open=True),
    )
    switch_floor: float = _opt(
        1 / 16,
        "an online phase ends no earlier than this fraction of training",
        range=Range(0, 1, high_open=True),
    )
    switch_ceiling: float = _opt(
        7 / 8,
        "an online phase ends by this fraction of training at the latest, whatever the signal",
        range=Range(0, 1, low_open=True, high_open=True),
    )
    # Local-H phases (core/sync/local.py, docs/local-updates.md).
    outer_optimizer: str = _opt(
        "average",
        "local-H phases: how a round of workers' model deltas is applied: average (local "
        "SGD: the mean of the workers' models) or nesterov (DiLoCo: SGD with Nesterov "
        "momentum over the mean delta, at --outer-lr and --outer-momentum)",
        choices=[k.value for k in OuterOptimizerKind],
    )
    outer_lr: float = _opt(
        1.0,
        "local-H phases: the outer step's learning rate (1 with average is plain model "
        "averaging; DiLoCo uses 0.7 with nesterov)",
        range=Range(0, MAX_OUTER_LR, low_open=True),
    )
    outer_momentum: float = _opt(
        0.9, "local-H phases: the nesterov outer step's momentum", range=Range(0, 1, high_open=True)
    )
    local_lr_factor: float = _opt(
        1.0,
        "local-H phases: a worker's own learning rate is --lr (with its schedule) times this; "
        "1 makes local-1 equal BSP",
        range=Range(0, 1, low_open=True),
    )
    local_steps_rule: str = _opt(
        "fixed",
        "local-H phases: fixed (H as the schedule says) or qsr (H grows as the learning rate "
        "decays: H x (lr at the phase's start / lr now)^2, at most 8 x H)",
        choices=[k.value for k in LocalStepsRule],
    )
    local_inner_state: str = _opt(
        "keep",
        "local-H phases: a worker's own momentum buffer carries over from round to round "
        "(keep; a new local phase starts it at zero) or starts at zero every round (reset)",
        choices=[k.value for k in StatePolicy],
    )
    local_server_momentum: str = _opt(
        "reset",
        "when a local-H phase ends: the server's momentum buffer (from before the phase) is "
        "zeroed (reset) or carried over (keep)",
        choices=[k.value for k in StatePolicy],
    )
    epochs: float = _opt(
        80.0,
        "total training workload, in passes over the training set",
        range=Range(0, MAX_EPOCHS, low_open=True),
    )
    batch_size: int = _opt(
        32,
        "per-worker batch size (a BSP update consumes workers x this)",
        range=Range(1, MAX_BATCH_SIZE),
    )
    lr: float = _opt(
        0.2,
        "learning rate of one BSP update; ASP/SSP updates use lr/workers (linear scaling)",
        range=Range(0, low_open=True),
    )
    momentum: float = _opt(
        0.9, "SGD momentum (used as is in BSP phases)", range=Range(0, 1, high_open=True)
    )
    momentum_at_switch: str = _opt(
        "scale",
        "momentum in ASP/SSP phases: keep, scale (momentum/workers), zero, or ramp "
        "(momentum/workers at the switch, back to momentum over --momentum-ramp)",
        choices=[p.value for p in MomentumPolicy],
    )
    momentum_ramp: float = _opt(
        0.1, "fraction of training over which 'ramp' restores momentum", range=Range(0, 1)
    )
    weight_decay: float = _opt(0.0, "L2 weight decay", range=Range(0))
    lr_schedule: str = _opt(
        "cosine",
        "learning-rate schedule over training progress (fraction of samples)",
        choices=[k.value for k in LrScheduleKind],
    )
    warmup: float = _opt(0.0, "linear learning-rate warmup, as a fraction of training")
    lr_milestones: list[float] | None = _opt(
        None, "for --lr-schedule step: fractions where lr is multiplied by --lr-gamma"
    )
    lr_gamma: float = _opt(0.1, "for --lr-schedule step: factor applied at each milestone")
    # Data and model.
    dataset: str = _opt("mnist1d", "dataset", choices=list(DATASETS))
    data_dir: str | None = _opt(None, "directory holding CIFAR files (never downloaded)")
    model: str | None = _opt(
        None,
        "model (default: cnn1d for mnist1d, resnet20 for cifar10, resnet32 for cifar100)",
        choices=list(MODELS),
    )
    mnist1d_samples: int = _opt(
        10000,
        "MNIST-1D samples to generate (80% train, 20% test)",
        range=Range(100, MAX_MNIST1D_SAMPLES),
    )
    seed: int = _opt(
        0, "seed for model init, data order and emulated jitter", range=Range(0, MAX_SEED)
    )
    # Measurement and output.
    eval_every: float = _opt(
        0.05,
        "evaluate test accuracy every this fraction of training",
        range=Range(MIN_EVERY_FRACTION, 1),
    )
    out: str | None = _opt(None, "run directory for results (default: runs/<time>-<schedule>)")
    progress: bool = _opt(True, "show a live progress display")
    logger: list[str] | None = _opt(
        None,
        "also log to tensorboard (RUN_DIR/tensorboard) and/or mlflow; repeatable or "
        "comma-separated; csv (the run directory's files) is always written",
        choices=list(LOGGERS),
        repeatable=True,
    )
    tracking_uri: str | None = _opt(
        None,
        "MLflow tracking URI for --logger mlflow (default: sqlite:///RUN_DIR/mlflow.db); it is "
        "saved in config.json, so give credentials through MLflow's environment variables",
    )
    # Where it runs.
    runtime: str = _opt(
        "ray",
        "ray: real processes (a local Ray, or a cluster); sim: one process plays every worker "
        "on a simulated clock, with real gradients, times from --cluster (docs/simulator.md)",
        choices=list(RUNTIMES),
    )
    cluster: str | None = _opt(
        None,
        "for --runtime sim: the cluster model, a preset (default, paper-k80, wan-1g) or a "
        "YAML/TOML FILE of compute, network and server costs; default: --step-time-ms etc. for "
        "compute (20 ms if not given) and a 10 GbE network",
    )
    ray_address: str | None = _opt(
        None, "Ray cluster to join (or set RAY_ADDRESS); default starts a local Ray instance"
    )
    device: str = _opt(
        "auto",
        "device the workers compute on: cuda, cpu, or auto (cuda when Ray reports GPUs)",
        choices=list(DEVICES),
    )
    evaluator_device: str = _opt(
        "auto", "device of the evaluator (auto: as for --device)", choices=list(DEVICES)
    )
    server_device: str = _opt(
        "cpu",
        "device the parameter servers apply updates on (auto: as for --device); cpu by "
        "default, so the GPUs are left to the workers",
        choices=list(DEVICES),
    )
    gpus_per_worker: float = _opt(
        0.0,
        "GPUs each worker asks Ray for (and the evaluator and servers when on cuda); a "
        "fraction shares one GPU, e.g. 0.125 puts 8 workers on a GPU; 0 = share the "
        "cluster's GPUs evenly when on cuda",
        range=Range(0, MAX_GPUS_PER_ACTOR),
    )
    placement: str = _opt(
        "pack",
        "where Ray puts the actors, through a placement group of one bundle per worker, "
        "server and the evaluator: pack (as few nodes as possible), spread (over the nodes, "
        "best effort) or strict-spread (each on its own node)",
        choices=list(PLACEMENTS),
    )
    # Cluster emulation (sleep-padded device time); recorded in every result file.
    step_time_ms: float = _opt(
        0.0,
        "emulated device time per worker step in ms; 0 = off",
        range=Range(0, MAX_STEP_TIME_MS),
    )
    speed_factors: list[float] | None = _opt(
        None,
        "per-worker multipliers of the emulated step time, e.g. 1,1,1,2",
        range=Range(0, MAX_SPEED_FACTOR, low_open=True),
    )
    jitter_sigma: float = _opt(
        0.0,
        "sigma of mean-one lognormal jitter on emulated step time",
        range=Range(0, MAX_JITTER_SIGMA),
    )
    stragglers: list | None = _opt(
        None,
        "emulated transient stragglers: a YAML/TOML FILE holding a list of episodes {workers, "
        "start|start_s, duration|duration_s, delay_ms|factor} and generators {random: {count, "
        "stragglers, duration, delay_ms|factor, window, seed}} or {paper: {stragglers, "
        "delay_ms, occurrences, seed}} (placed in the first BSP phase); in a --config file, "
        "the list itself",
        from_file=True,
    )
    # Online reaction to stragglers (detection runs whenever a policy or stragglers are set).
    online_policy: str = _opt(
        "none",
        "reaction to detected stragglers: none (log only), greedy (switch to ASP at once) or "
        "elastic (the BSP barrier stops waiting for them until they recover)",
        choices=[k.value for k in StragglerPolicyKind],
    )
    greedy_return: bool = _opt(
        False, "greedy only: back to BSP after recovery until the planned BSP samples are done"
    )
    straggler_threshold: float = _opt(
        1.5, "a worker is a straggler when its median step > this x the others' median"
    )
    straggler_recover_threshold: float = _opt(
        1.2, "a straggler has recovered when its ratio drops below this (hysteresis)"
    )
    straggler_window: int = _opt(
        9,
        "recent steps per worker the straggler detector considers",
        range=Range(1, MAX_STRAGGLER_WINDOW),
    )
    # Reliability: checkpoints, failures, divergence.
    checkpoint_every: float = _opt(
        0.05,
        "checkpoint every this fraction of training (0 = off; a final one is always made)",
        range=Range(MIN_EVERY_FRACTION, 1, high_open=True, off=True),
    )
    checkpoint_every_s: float = _opt(
        0.0,
        "also checkpoint every this many seconds (0 = off)",
        range=Range(0, MAX_SECONDS, unit=" seconds"),
    )
    divergence_guard: bool = _opt(
        True,
        "watch the training loss; on divergence roll back to the last good checkpoint and "
        "continue under BSP at a lower learning rate",
    )
    rollback_lr_factor: float = _opt(
        0.5,
        "learning rate multiplier applied at each divergence rollback",
        range=Range(0, 1, low_open=True),
    )
    worker_timeout_s: float = _opt(
        60.0,
        "a worker silent this long (and not waiting on the server) is declared hung, "
        "killed and restarted",
        range=Range(0, MAX_SECONDS, low_open=True, unit=" seconds"),
    )
    max_worker_restarts: int = _opt(
        100,
        "restarts allowed per worker before the run fails",
        range=Range(0, MAX_WORKER_RESTARTS),
    )
    faults: list | None = _opt(
        None,
        "INJECTED faults for testing reliability: a YAML/TOML FILE holding a list of {kind: "
        "nan_gradient|wrong_shape|crash|hang, worker, at (fraction)}; recorded in every result",
        from_file=True,
    )

    if TYPE_CHECKING:
        # Set once by __post_init__ (the dataclass is frozen); not a field at run time, and
        # init=False tells the type checker it is none of the constructor's arguments.
        _parsed: _Parsed = field(init=False)

    def __post_init__(self) -> None:
        self._validate()

    # -- validation ---------------------------------------------------------------------------

    def _validate(self) -> None:
        """Every field against its declaration, then what relates fields to each other; what
        is parsed on the way is kept (`_parsed`)."""
        for f in fields(self):
            check_field(f, getattr(self, f.name))
        self._validate_workload_size()
        if self.ray_address is not None:
            parse_cluster_address(self.ray_address)
        cluster = self._validate_cluster()
        self._validate_gpus()
        self._validate_online()
        self._validate_loggers()
        if self.speed_factors and len(self.speed_factors) != self.workers:
            raise ConfigError(
                f"speed_factors has {len(self.speed_factors)} values but workers is "
                f"{self.workers}: give one factor per worker"
            )
        if self.switch_floor > self.switch_ceiling:
            raise ConfigError(
                f"switch_floor = {self.switch_floor:g} is above switch_ceiling = "
                f"{self.switch_ceiling:g}: the online phase could never end in between"
            )
        try:
            schedule = None if self.schedule_is_auto else Schedule.parse(self.schedule)
            if schedule is not None:
                schedule = schedule.with_online_ceiling(self.switch_ceiling)
            scenario = self._build_scenario(schedule)
            parsed = _Parsed(
                schedule=schedule,
                lr_schedule=self._build_lr_schedule(),
                scenario=scenario,
                emulation=EmulationConfig(
                    step_time_ms=self.step_time_ms,
                    speed_factors=tuple(self.speed_factors or ()),
                    jitter_sigma=self.jitter_sigma,
                    stragglers=scenario,
                ),
                faults=parse_faults(self.faults, self.workers),
                cluster=cluster,
            )
            self.detector_config()  # its own checks of the thresholds
        except (ScheduleError, ValueError, TypeError, OverflowError) as error:
            raise ConfigError(str(error)) from None
        object.__setattr__(self, "_parsed", parsed)

    def _validate_workload_size(self) -> None:
        """epochs x training samples is the total workload; bounded so that run lengths,
        schedules and evaluation points stay exact integers of a sane size."""
        train_samples = self.mnist1d_samples if self.dataset == "mnist1d" else CIFAR_TRAIN_SAMPLES
        total = self.epochs * train_samples
        if total > MAX_TOTAL_SAMPLES:
            raise ConfigError(
                f"epochs = {self.epochs:g} over up to {train_samples} training samples is "
                f"{total:.3g} samples; at most {MAX_TOTAL_SAMPLES:.0e} allowed"
            )

    def _validate_gpus(self) -> None:
        if self.gpus_per_worker > 1 and not float(self.gpus_per_worker).is_integer():
            raise ConfigError(
                f"gpus_per_worker = {self.gpus_per_worker:g} is not allowed; above 1 it must be "
                "a whole number of GPUs (Ray shares a GPU only in fractions of one)"
            )
        if self.gpus_per_worker > 0 and all(d == "cpu" for d in self.role_devices().values()):
            raise ConfigError(
                f"gpus_per_worker = {self.gpus_per_worker:g} asks for GPUs, but every device is "
                "cpu; use --device cuda or auto, or drop --gpus-per-worker"
            )

    def _validate_cluster(self) -> ClusterModel | None:
        if self.runtime == "sim":
            return self._build_cluster()
        if self.cluster is not None:
            raise ConfigError(
                f"cluster {self.cluster!r} applies to --runtime sim (the simulator); a Ray "
                "run's timing is the real one (or --step-time-ms emulation)"
            )
        return None

    def _validate_online(self) -> None:
        if self.greedy_return and self.online_policy != StragglerPolicyKind.GREEDY:
            raise ConfigError(
                f"greedy_return applies to online_policy greedy, not {self.online_policy!r}"
            )

    def _validate_loggers(self) -> None:
        for name in self.logger or ():
            if name not in LOGGERS:
                raise ConfigError(
                    f"logger {name!r} is not allowed; choose from {', '.join(LOGGERS)}"
                )
            missing = missing_logger_packages(name, self.tracking_uri)
            if missing:
                raise ConfigError(
                    f"logger {name!r} needs {', '.join(missing)}, which is not installed: "
                    f"pip install 'syncswitch[{name}]'"
                )
        if self.tracking_uri is not None and "mlflow" not in (self.logger or ()):
            raise ConfigError("tracking_uri applies to logger mlflow: add --logger mlflow")

    # -- what validation built, and views derived from the fields -----------------------------

    def role_devices(self) -> dict[str, str]:
        """Each role's device as asked ('auto' still to be resolved against the cluster);
        the evaluator's and servers' 'auto' follows --device."""

        def follow(value: str) -> str:
            return self.device if value == "auto" else value

        return {
            "worker": self.device,
            "evaluator": follow(self.evaluator_device),
            "server": follow(self.server_device),
        }

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL[self.dataset]

    @property
    def schedule_is_auto(self) -> bool:
        return self.schedule.strip().lower() == AUTO_SCHEDULE

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
            steps_rule=LocalStepsRule(self.local_steps_rule),
            inner_state=StatePolicy(self.local_inner_state),
            server_momentum_after=StatePolicy(self.local_server_momentum),
            worker_batch=self.batch_size,
            inner_lr_factor=self.local_lr_factor,
        )

    def detector_config(self) -> DetectorConfig:
        return DetectorConfig(
            window=self.straggler_window,
            threshold=self.straggler_threshold,
            recover_threshold=self.straggler_recover_threshold,
            min_steps=min(DetectorConfig.min_steps, self.straggler_window),
        )

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # -- building the parsed parts (once, from _validate) -------------------------------------

    def _build_lr_schedule(self) -> LrSchedule:
        milestones = tuple(self.lr_milestones) if self.lr_milestones else (0.5, 0.75)
        return LrSchedule(
            kind=LrScheduleKind(self.lr_schedule),
            warmup_fraction=self.warmup,
            milestones=milestones,
            gamma=self.lr_gamma,
        )

    def _build_scenario(self, schedule: Schedule | None) -> StragglerScenario:
        if not self.stragglers:
            return StragglerScenario()
        # Generated stragglers are placed in the first BSP phase (none while 'auto').
        phases = schedule.phases if schedule is not None else ()
        bsp_end = next((p.end for p in phases if p.spec.protocol is Protocol.BSP), None)
        return build_scenario(self.stragglers, workers=self.workers, bsp_end=bsp_end)

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
