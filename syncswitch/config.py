"""The training job's configuration: one typed dataclass, validated before anything starts.

Every field is also a `syncswitch train` flag (underscores become dashes) and a key of a
`--config` YAML/TOML file, so the three ways of setting a value cannot drift apart.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from syncswitch.cluster_address import parse_cluster_address
from syncswitch.core.cluster import (
    DEFAULT_STEP_TIME_MS,
    ClusterError,
    ClusterModel,
    ComputeModel,
    parse_cluster,
    preset,
)
from syncswitch.core.emulation import EmulationConfig
from syncswitch.core.faults import FaultPlan, parse_faults
from syncswitch.core.hyperparams import LrSchedule, LrScheduleKind, MomentumPolicy
from syncswitch.core.online import OnlineConfig
from syncswitch.core.policies import OnlinePolicyKind
from syncswitch.core.protocol import Protocol, Schedule, ScheduleError
from syncswitch.core.scenarios import StragglerScenario, build_scenario
from syncswitch.core.stragglers import DetectorConfig
from syncswitch.errors import ConfigError
from syncswitch.files import UnsafeFileError, read_regular
from syncswitch.keys import unknown_key_problem
from syncswitch.loggers import LOGGERS
from syncswitch.loggers import missing_packages as missing_logger_packages

DATASETS = ("mnist1d", "cifar10", "cifar100")
RUNTIMES = ("ray", "sim")
MODELS = ("cnn1d", "resnet20", "resnet32")
DEFAULT_MODEL = {"mnist1d": "cnn1d", "cifar10": "resnet20", "cifar100": "resnet32"}
# `schedule: auto` names the job's stored timing decision; it is resolved from the registry
# (syncswitch.timing.auto) before training, so a run never sees it.
AUTO_SCHEDULE = "auto"

# Upper bounds on what a user may ask for, checked before anything is allocated or started.
# They are far above any job this project runs (the paper's largest has 16 workers); past them
# a value is a typo or a hostile file, and would exhaust memory, processes or time.
MAX_WORKERS = 1024
MAX_SERVERS = 64
MAX_BATCH_SIZE = 65536
MAX_EPOCHS = 100_000.0
MAX_TOTAL_SAMPLES = 10**10  # epochs x training samples: ~12 days at 10k samples/s
MAX_MNIST1D_SAMPLES = 1_000_000
CIFAR_TRAIN_SAMPLES = 50_000
MIN_EVERY_FRACTION = 1e-4  # eval_every, checkpoint_every: at most 10,000 of each per run
MAX_STEP_TIME_MS = 60_000.0
MAX_JITTER_SIGMA = 3.0
MAX_SPEED_FACTOR = 1000.0
MAX_SECONDS = 7 * 24 * 3600.0  # checkpoint_every_s, worker_timeout_s
MAX_WORKER_RESTARTS = 10_000
MAX_STRAGGLER_WINDOW = 10_000
MAX_SEED = 2**31 - 1  # seed + repeats must still fit numpy's and torch's seed types
MAX_LIST_ITEMS = 10_000  # lr_milestones, speed_factors, stragglers and faults entries
MAX_TEXT_CHARS = 4096  # any text option: schedule, paths, addresses
MAX_GPUS_PER_ACTOR = 64.0  # more GPUs than any one machine holds
DEVICES = ("auto", "cpu", "cuda")
PLACEMENTS = ("pack", "spread", "strict-spread")
# Config and list files are a few hundred bytes; a cap keeps a hostile one from filling memory.
MAX_CONFIG_FILE_BYTES = 1 << 20


def _opt(default: Any, help: str, **extra: Any) -> Any:
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class TrainConfig:
    # The job: what is trained, by how many workers, under which protocols.
    workers: int = _opt(8, "number of worker actors (data-parallel replicas)")
    servers: int = _opt(1, "parameter-server actors; parameters are sharded evenly over them")
    schedule: str = _opt(
        "bsp:0.25,asp",
        "protocol phases PROTOCOL[:END],...: PROTOCOL is bsp, asp or ssp-S; END is the fraction "
        "of total training samples where the phase ends; the last phase runs to the end; "
        "'auto': this job's stored switch point (from `syncswitch search`), else bsp:0.25,asp",
    )
    epochs: float = _opt(80.0, "total training workload, in passes over the training set")
    batch_size: int = _opt(32, "per-worker batch size (a BSP update consumes workers x this)")
    lr: float = _opt(
        0.2, "learning rate of one BSP update; ASP/SSP updates use lr/workers (linear scaling)"
    )
    momentum: float = _opt(0.9, "SGD momentum (used as is in BSP phases)")
    momentum_at_switch: str = _opt(
        "scale",
        "momentum in ASP/SSP phases: keep, scale (momentum/workers), zero, or ramp "
        "(momentum/workers at the switch, back to momentum over --momentum-ramp)",
        choices=[p.value for p in MomentumPolicy],
    )
    momentum_ramp: float = _opt(0.1, "fraction of training over which 'ramp' restores momentum")
    weight_decay: float = _opt(0.0, "L2 weight decay")
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
    mnist1d_samples: int = _opt(10000, "MNIST-1D samples to generate (80% train, 20% test)")
    seed: int = _opt(0, "seed for model init, data order and emulated jitter")
    # Measurement and output.
    eval_every: float = _opt(0.05, "evaluate test accuracy every this fraction of training")
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
        "for --runtime sim: the cluster model, a preset (default, paper-k80) or a YAML/TOML "
        "FILE of compute, network and server costs; default: --step-time-ms etc. for compute "
        "(20 ms if not given) and a 10 GbE network",
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
    )
    placement: str = _opt(
        "pack",
        "where Ray puts the actors, through a placement group of one bundle per worker, "
        "server and the evaluator: pack (as few nodes as possible), spread (over the nodes, "
        "best effort) or strict-spread (each on its own node)",
        choices=list(PLACEMENTS),
    )
    # Cluster emulation (sleep-padded device time); recorded in every result file.
    step_time_ms: float = _opt(0.0, "emulated device time per worker step in ms; 0 = off")
    speed_factors: list[float] | None = _opt(
        None, "per-worker multipliers of the emulated step time, e.g. 1,1,1,2"
    )
    jitter_sigma: float = _opt(0.0, "sigma of mean-one lognormal jitter on emulated step time")
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
        choices=[k.value for k in OnlinePolicyKind],
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
    straggler_window: int = _opt(9, "recent steps per worker the straggler detector considers")
    # Reliability: checkpoints, failures, divergence.
    checkpoint_every: float = _opt(
        0.05, "checkpoint every this fraction of training (0 = off; a final one is always made)"
    )
    checkpoint_every_s: float = _opt(0.0, "also checkpoint every this many seconds (0 = off)")
    divergence_guard: bool = _opt(
        True,
        "watch the training loss; on divergence roll back to the last good checkpoint and "
        "continue under BSP at a lower learning rate",
    )
    rollback_lr_factor: float = _opt(
        0.5, "learning rate multiplier applied at each divergence rollback"
    )
    worker_timeout_s: float = _opt(
        60.0,
        "a worker silent this long (and not waiting on the server) is declared hung, "
        "killed and restarted",
    )
    max_worker_restarts: int = _opt(100, "restarts allowed per worker before the run fails")
    faults: list | None = _opt(
        None,
        "INJECTED faults for testing reliability: a YAML/TOML FILE holding a list of {kind: "
        "nan_gradient|wrong_shape|crash|hang, worker, at (fraction)}; recorded in every result",
        from_file=True,
    )

    def __post_init__(self) -> None:
        self.validate()

    # -- validation ---------------------------------------------------------------------------

    def validate(self) -> None:
        self._validate_types_and_sizes()
        _require(1 <= self.workers <= MAX_WORKERS, "workers", self.workers, f"in 1..{MAX_WORKERS}")
        _require(1 <= self.servers <= MAX_SERVERS, "servers", self.servers, f"in 1..{MAX_SERVERS}")
        _require(0 < self.epochs <= MAX_EPOCHS, "epochs", self.epochs, f"> 0 and <= {MAX_EPOCHS:g}")
        _require(
            1 <= self.batch_size <= MAX_BATCH_SIZE,
            "batch_size",
            self.batch_size,
            f"in 1..{MAX_BATCH_SIZE}",
        )
        _require(self.lr > 0, "lr", self.lr, "> 0")
        _require(0 <= self.momentum < 1, "momentum", self.momentum, "in [0, 1)")
        _require(0 <= self.momentum_ramp <= 1, "momentum_ramp", self.momentum_ramp, "in [0, 1]")
        _require(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        _require(
            MIN_EVERY_FRACTION <= self.eval_every <= 1,
            "eval_every",
            self.eval_every,
            f"in [{MIN_EVERY_FRACTION:g}, 1]",
        )
        _require(
            100 <= self.mnist1d_samples <= MAX_MNIST1D_SAMPLES,
            "mnist1d_samples",
            self.mnist1d_samples,
            f"in 100..{MAX_MNIST1D_SAMPLES}",
        )
        _require(0 <= self.seed <= MAX_SEED, "seed", self.seed, f"in 0..{MAX_SEED}")
        self._validate_workload_size()
        self._validate_emulation_sizes()
        if self.ray_address is not None:
            parse_cluster_address(self.ray_address)
        self._check_choice("runtime")
        self._validate_cluster()
        self._check_choice("momentum_at_switch")
        self._check_choice("online_policy")
        self._check_choice("lr_schedule")
        self._check_choice("dataset")
        self._validate_devices()
        if self.model is not None:
            self._check_choice("model")
        try:
            if not self.schedule_is_auto:
                Schedule.parse(self.schedule)
            self.lr_schedule_spec()
            self.emulation()
        except (ScheduleError, ValueError, TypeError, OverflowError) as error:
            raise ConfigError(str(error)) from None
        self._validate_online()
        self._validate_loggers()
        _require(
            self.checkpoint_every == 0 or MIN_EVERY_FRACTION <= self.checkpoint_every < 1,
            "checkpoint_every",
            self.checkpoint_every,
            f"0 (off) or in [{MIN_EVERY_FRACTION:g}, 1)",
        )
        _require(
            0 <= self.checkpoint_every_s <= MAX_SECONDS,
            "checkpoint_every_s",
            self.checkpoint_every_s,
            f"in [0, {MAX_SECONDS:g}] seconds",
        )
        _require(
            0 < self.rollback_lr_factor <= 1,
            "rollback_lr_factor",
            self.rollback_lr_factor,
            "in (0, 1]",
        )
        _require(
            0 < self.worker_timeout_s <= MAX_SECONDS,
            "worker_timeout_s",
            self.worker_timeout_s,
            f"> 0 and <= {MAX_SECONDS:g} seconds",
        )
        _require(
            0 <= self.max_worker_restarts <= MAX_WORKER_RESTARTS,
            "max_worker_restarts",
            self.max_worker_restarts,
            f"in 0..{MAX_WORKER_RESTARTS}",
        )
        try:
            self.fault_plan()
        except (ValueError, TypeError, OverflowError) as error:
            raise ConfigError(str(error)) from None
        if self.speed_factors and len(self.speed_factors) != self.workers:
            raise ConfigError(
                f"speed_factors has {len(self.speed_factors)} values but workers is "
                f"{self.workers}: give one factor per worker"
            )

    def _validate_types_and_sizes(self) -> None:
        """Every field has its declared type, every number is finite, every text and list is
        of bounded size: the checks after this one may then compare and compute freely."""
        for f in fields(self):
            value = getattr(self, f.name)
            type_name = str(f.type)
            if value is None and type_name.endswith("| None"):
                continue
            problem = _type_problem(type_name.replace("| None", "").strip(), value)
            if problem:
                raise ConfigError(
                    f"{f.name} = {_short(value)} is not allowed; it must be {problem}"
                )
            if isinstance(value, str | list):
                limit = MAX_TEXT_CHARS if isinstance(value, str) else MAX_LIST_ITEMS
                if len(value) > limit:
                    unit = "characters" if isinstance(value, str) else "entries"
                    raise ConfigError(
                        f"{f.name} has {len(value)} {unit}; at most {limit} are allowed"
                    )

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

    def _validate_devices(self) -> None:
        for name in ("device", "evaluator_device", "server_device", "placement"):
            self._check_choice(name)
        _require(
            0 <= self.gpus_per_worker <= MAX_GPUS_PER_ACTOR,
            "gpus_per_worker",
            self.gpus_per_worker,
            f"in [0, {MAX_GPUS_PER_ACTOR:g}]",
        )
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

    def _validate_emulation_sizes(self) -> None:
        _require(
            0 <= self.step_time_ms <= MAX_STEP_TIME_MS,
            "step_time_ms",
            self.step_time_ms,
            f"in [0, {MAX_STEP_TIME_MS:g}]",
        )
        _require(
            0 <= self.jitter_sigma <= MAX_JITTER_SIGMA,
            "jitter_sigma",
            self.jitter_sigma,
            f"in [0, {MAX_JITTER_SIGMA:g}]",
        )
        for factor in self.speed_factors or ():
            _require(
                0 < factor <= MAX_SPEED_FACTOR,
                "speed_factors",
                factor,
                f"> 0 and <= {MAX_SPEED_FACTOR:g} (each)",
            )

    def _validate_cluster(self) -> None:
        if self.runtime != "sim":
            if self.cluster is not None:
                raise ConfigError(
                    f"cluster {self.cluster!r} applies to --runtime sim (the simulator); a Ray "
                    "run's timing is the real one (or --step-time-ms emulation)"
                )
            return
        self.cluster_model()

    def _validate_online(self) -> None:
        if self.greedy_return and self.online_policy != OnlinePolicyKind.GREEDY:
            raise ConfigError(
                f"greedy_return applies to online_policy greedy, not {self.online_policy!r}"
            )
        _require(
            1 <= self.straggler_window <= MAX_STRAGGLER_WINDOW,
            "straggler_window",
            self.straggler_window,
            f"in 1..{MAX_STRAGGLER_WINDOW}",
        )
        try:
            self.detector_config()
            self.scenario()
        except (ValueError, TypeError, OverflowError) as error:
            raise ConfigError(str(error)) from None

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

    def _check_choice(self, name: str) -> None:
        value = getattr(self, name)
        allowed = next(f for f in fields(self) if f.name == name).metadata["choices"]
        if value not in allowed:
            raise ConfigError(
                f"{name} {value!r} is not allowed; choose one of {', '.join(allowed)}"
            )

    # -- derived views ----------------------------------------------------------------------

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
        if self.schedule_is_auto:
            raise ConfigError(
                "schedule 'auto' must be resolved before training: use `syncswitch train` or "
                "syncswitch.timing.resolve_auto_schedule(config)"
            )
        return Schedule.parse(self.schedule)

    def lr_schedule_spec(self) -> LrSchedule:
        milestones = tuple(self.lr_milestones) if self.lr_milestones else (0.5, 0.75)
        return LrSchedule(
            kind=LrScheduleKind(self.lr_schedule),
            warmup_fraction=self.warmup,
            milestones=milestones,
            gamma=self.lr_gamma,
        )

    def emulation(self) -> EmulationConfig:
        return EmulationConfig(
            step_time_ms=self.step_time_ms,
            speed_factors=tuple(self.speed_factors or ()),
            jitter_sigma=self.jitter_sigma,
            stragglers=self.scenario(),
        )

    def cluster_model(self) -> ClusterModel:
        """The simulator's cluster: --cluster (a preset or a file), with its compute model
        from the emulation flags when the cluster does not give one."""
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

    def fault_plan(self) -> FaultPlan:
        return parse_faults(self.faults, self.workers)

    def scenario(self) -> StragglerScenario:
        if not self.stragglers:
            return StragglerScenario()
        return build_scenario(self.stragglers, workers=self.workers, bsp_end=self._first_bsp_end())

    def _first_bsp_end(self) -> float | None:
        try:
            phases = Schedule.parse(self.schedule).phases
        except ScheduleError:
            return None  # e.g. a schedule still to be resolved; checked where it is parsed
        return next((p.end for p in phases if p.spec.protocol is Protocol.BSP), None)

    def detector_config(self) -> DetectorConfig:
        return DetectorConfig(
            window=self.straggler_window,
            threshold=self.straggler_threshold,
            recover_threshold=self.straggler_recover_threshold,
            min_steps=min(DetectorConfig.min_steps, self.straggler_window),
        )

    def online(self) -> OnlineConfig:
        return OnlineConfig(
            policy=OnlinePolicyKind(self.online_policy),
            greedy_return=self.greedy_return,
            detector=self.detector_config(),
        )

    @property
    def watches_stragglers(self) -> bool:
        """Whether the run detects stragglers: a policy acts on them or they are emulated."""
        return self.online_policy != OnlinePolicyKind.NONE or bool(self.stragglers)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _require(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{name} = {_short(value)} is not allowed; it must be {allowed}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_problem(base: str, value: Any) -> str | None:
    """What `value` must be instead, for a field of type `base`; None when it fits."""
    if base == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        return "an integer"
    if base == "bool" and not isinstance(value, bool):
        return "true or false"
    if base == "float" and not (_is_number(value) and math.isfinite(value)):
        return "a finite number"
    if base == "str" and not isinstance(value, str):
        return "text"
    if base.startswith("list") and not isinstance(value, list):
        return "a list"
    if base == "list[float]" and not all(_is_number(v) and math.isfinite(v) for v in value):
        return "a list of finite numbers"
    return None


def _short(value: Any, limit: int = 80) -> str:
    """A value's repr cut to one short line (a hostile value may be huge or multi-line)."""
    try:
        text = " ".join(repr(value).split())
    except ValueError:  # an int too long to print (Python caps int-to-text conversion)
        return f"an integer of {value.bit_length()} bits"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def config_fields() -> list:
    return list(fields(TrainConfig))


def field_default(f: Any) -> Any:
    return None if f.default is MISSING else f.default


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases (&name / *name).

    An alias refers to an earlier node, so a few hundred bytes of nested aliases describe a
    structure of billions of entries (the "billion laughs"); no job file needs them.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = event.start_mark
            raise _AliasRefused(
                f"anchors and aliases (&name, *name) are not allowed (line {mark.line + 1})"
            )
        return super().compose_node(parent, index)


class _AliasRefused(Exception):
    pass


def read_structured_file(path: str | Path, what: str) -> Any:
    """Parse a YAML or TOML file (YAML loaded safely: no tags that build objects, no aliases).

    Only a regular file of at most MAX_CONFIG_FILE_BYTES is read (a FIFO or a device would
    block or never end), and every way parsing can fail ends in one ConfigError line.
    """
    path = Path(path)
    shown = str(path)
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise ConfigError(f"{what} {shown!r}: use a .yaml, .yml or .toml file")
    try:
        raw = read_regular(path, MAX_CONFIG_FILE_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{what} {shown!r} does not exist") from None
    except OSError as error:
        raise ConfigError(f"{what} {shown!r} cannot be read: {_os_reason(error)}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{what} {shown!r} is not UTF-8 text (byte {error.start}); save it as UTF-8"
        ) from None
    try:
        if path.suffix == ".toml":
            return tomllib.loads(text)
        return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except _AliasRefused as error:
        raise ConfigError(f"{what} {shown!r}: {error}") from None
    except RecursionError:
        raise ConfigError(f"{what} {shown!r} is nested too deeply to be a job file") from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError) as error:
        # ValueError: e.g. an integer literal too long for Python to convert.
        detail = " ".join(str(error).split())  # one line, however the parser formats it
        raise ConfigError(f"{what} {shown!r} cannot be parsed: {detail[:300]}") from None


def _os_reason(error: OSError) -> str:
    if isinstance(error, UnsafeFileError):
        return str(error)
    return error.strerror or type(error).__name__


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or TOML job file into a dict of TrainConfig keys (dashes allowed)."""
    data = read_structured_file(path, "config file") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of options")
    normalised = {str(key).replace("-", "_"): value for key, value in data.items()}
    problem = unknown_key_problem(normalised, _OPTION_NAMES, _OPTIONS_TEXT)
    if problem:
        raise ConfigError(f"config file {str(path)!r}: {problem}")
    for name in FLAG_ONLY:
        if name in normalised:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"{name} in {str(path)!r} is not allowed: where the job connects is taken only "
                f"from {flag} or the RAY_ADDRESS environment variable, never from a file"
            )
    return normalised


_OPTION_NAMES = tuple(f.name for f in fields(TrainConfig))
_OPTIONS_TEXT = "the `syncswitch train` options, e.g. workers, schedule, epochs, lr"

# Options a file may never set (see docs/security.md): a config file can come from anywhere,
# and it must not choose the cluster that receives the job's model, data and code.
FLAG_ONLY = ("ray_address",)


def load_list_file(path: str | Path, key: str) -> list:
    """Read a list option from its own file: the list itself, or a mapping holding `key`.

    TOML cannot hold a bare list, so there it is `key = [...]` (an array of tables).
    """
    data = read_structured_file(path, f"{key} file")
    if isinstance(data, dict) and set(data) == {key}:
        data = data[key]
    if not isinstance(data, list):
        raise ConfigError(
            f"{key} file {str(path)!r} must hold a list, or a mapping with the single key "
            f"{key!r}, got {type(data).__name__}"
        )
    if len(data) > MAX_LIST_ITEMS:
        raise ConfigError(
            f"{key} file {str(path)!r} has {len(data)} entries; at most {MAX_LIST_ITEMS} allowed"
        )
    return data


def parse_value(name: str, type_name: str, value: Any) -> Any:
    """Coerce a flag string or file value to the field's type, or fail naming both."""
    optional = type_name.endswith("| None")
    base = type_name.replace("| None", "").strip()
    if value is None or (optional and isinstance(value, str) and value.lower() == "none"):
        return None
    try:
        if base == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).lower()
            if text in ("true", "yes", "1", "on"):
                return True
            if text in ("false", "no", "0", "off"):
                return False
            raise ValueError
        if base == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if base == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if base == "list":
            if not isinstance(value, list):
                raise ValueError
            return value
        if base == "list[float]":
            items = value.split(",") if isinstance(value, str) else list(value)
            return [float(item) for item in items if str(item).strip()]
        if base == "list[str]":
            # "a,b", ["a", "b"] and a repeated flag's ["a", "b,c"] alike.
            items = [value] if isinstance(value, str) else list(value)
            names = [n.strip().lower() for item in items for n in str(item).split(",")]
            return list(dict.fromkeys(n for n in names if n))
        return str(value)
    except (TypeError, ValueError, OverflowError):
        kind = {
            "list[float]": "a comma-separated list of numbers",
            "list[str]": "a comma-separated list of names",
            "int": "an integer",
            "float": "a number",
            "bool": "true or false",
            "list": "a list",
        }.get(base, f"a {base}")
        raise ConfigError(f"{name} = {_short(value)} is not allowed; it must be {kind}") from None


def make_config(values: dict[str, Any]) -> TrainConfig:
    """Build a validated TrainConfig from loosely typed values (flags or file entries)."""
    by_name = {f.name: f for f in fields(TrainConfig)}
    problem = unknown_key_problem(values, _OPTION_NAMES, _OPTIONS_TEXT)
    if problem:
        raise ConfigError(problem)
    typed = {}
    for name, value in values.items():
        typed[name] = parse_value(name, str(by_name[name].type), value)
    return TrainConfig(**typed)
