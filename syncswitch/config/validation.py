"""What relates a job's options to each other, checked once when the job is built, and the
parts that checking parses (the schedule, the straggler scenario, the fault plan), kept so
that nothing parses them again.

Each option's own checks are its declaration's (options.py, checks.py); these are the rest.
Every refusal is one ConfigError line naming the value and what is allowed. The Python API
and the command line get the same checks: a TrainConfig is validated when it is built.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from syncswitch.cluster_address import parse_cluster_address
from syncswitch.config.components import (
    cluster_model,
    detector_config,
    emulation_config,
    fault_plan,
    lr_schedule,
    straggler_scenario,
)
from syncswitch.config.declare import online_only
from syncswitch.config.limits import AUTO_SCHEDULE, CIFAR_TRAIN_SAMPLES, MAX_TOTAL_SAMPLES
from syncswitch.config.options import TrainOptions
from syncswitch.core.cluster.emulation import EmulationConfig
from syncswitch.core.cluster.model import ClusterModel
from syncswitch.core.reliability.faults import FaultPlan
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.core.stragglers.scenarios import StragglerScenario
from syncswitch.core.sync.hyperparams import LrSchedule
from syncswitch.core.sync.protocol import Schedule, ScheduleError
from syncswitch.core.sync.server_optimizer import OptimizerKind
from syncswitch.errors import ConfigError
from syncswitch.import_path import is_import_path
from syncswitch.loggers import LOGGERS
from syncswitch.loggers import missing_packages as missing_logger_packages

# The options that tune how an online phase decides (declared `online_only`).
SWITCH_OPTIONS: tuple[str, ...] = online_only(fields(TrainOptions))


@dataclass(frozen=True)
class Parsed:
    """What validating a config parsed, kept so that nothing parses it again; each part
    built by its component's function (components.py)."""

    schedule: Schedule | None  # None: 'auto', still to be resolved
    lr_schedule: LrSchedule
    scenario: StragglerScenario
    emulation: EmulationConfig
    faults: FaultPlan
    cluster: ClusterModel | None  # the simulator's; None on Ray

    def sim_cluster(self) -> ClusterModel:
        """The simulator's cluster model, for a job that runs on it (`--runtime sim`)."""
        if self.cluster is None:
            raise ConfigError("a Ray job has no cluster model: it applies to --runtime sim")
        return self.cluster


class SwitchOptionsError(ConfigError):
    """Switch options set for a schedule with no online END; `schedule` is that schedule."""

    def __init__(self, names: list[str], schedule: str) -> None:
        super().__init__(switch_options_problem(names, schedule))
        self.schedule = schedule


class StalenessOptionsError(ConfigError):
    """Staleness options set for a schedule with no ASP/SSP phase."""


def validate_job(config: TrainOptions) -> Parsed:
    """Every check that relates options to each other, in order; the parsed parts."""
    _check_own_code(config)
    _check_workload_size(config)
    if config.ray_address is not None:
        parse_cluster_address(config.ray_address)
    cluster = _check_cluster(config)
    _check_gpus(config)
    if config.greedy_return and config.online_policy != StragglerPolicyKind.GREEDY:
        raise ConfigError(
            f"greedy_return applies to online_policy greedy, not {config.online_policy!r}"
        )
    _check_loggers(config)
    _check_optimizer(config)
    if config.speed_factors and len(config.speed_factors) != config.workers:
        raise ConfigError(
            f"speed_factors has {len(config.speed_factors)} values but workers is "
            f"{config.workers}: give one factor per worker"
        )
    if config.early_stop_min_delta and not config.early_stop_patience:
        raise ConfigError(
            "--early-stop-min-delta does nothing without --early-stop-patience (the number "
            "of evaluations without such an improvement that ends the run)"
        )
    if config.switch_floor > config.switch_ceiling:
        raise ConfigError(
            f"switch_floor = {config.switch_floor:g} is above switch_ceiling = "
            f"{config.switch_ceiling:g}: the online phase could never end in between"
        )
    try:
        schedule = None if is_auto(config.schedule) else Schedule.parse(config.schedule)
        if schedule is not None:
            schedule = schedule.with_online_ceiling(config.switch_ceiling)
        scenario = straggler_scenario(config, schedule)
        parsed = Parsed(
            schedule=schedule,
            lr_schedule=lr_schedule(config),
            scenario=scenario,
            emulation=emulation_config(config, scenario, cluster),
            faults=fault_plan(config),
            cluster=cluster,
        )
        detector_config(config)  # its own checks of the thresholds
    except (ScheduleError, ValueError, TypeError, OverflowError) as error:
        raise ConfigError(str(error)) from None
    _check_staleness_options(config, schedule)
    if schedule is not None and schedule.online_index is None:
        defaults = {f.name: f.default for f in fields(config)}
        moot = [name for name in SWITCH_OPTIONS if getattr(config, name) != defaults[name]]
        if moot:
            raise SwitchOptionsError(moot, config.schedule)
    return parsed


# The staleness rules' options (core/sync/staleness.py): they act in ASP/SSP phases only.
STALENESS_OPTIONS = ("staleness_lr", "staleness_lr_floor", "delay_compensation")


def _check_staleness_options(config: TrainOptions, schedule: Schedule | None) -> None:
    """Staleness options that would do nothing are refused, naming them: a schedule with no
    ASP/SSP phase, or a floor without --staleness-lr inverse."""
    defaults = {f.name: f.default for f in fields(config)}
    given = [name for name in STALENESS_OPTIONS if getattr(config, name) != defaults[name]]
    flags = ", ".join("--" + name.replace("_", "-") for name in given)
    asynchronous = schedule is None or any(p.spec.is_async for p in schedule.phases)
    if given and not asynchronous:
        raise StalenessOptionsError(
            f"{flags} {'apply' if len(given) > 1 else 'applies'} to ASP/SSP phases; "
            f"schedule {config.schedule!r} has none: drop {'them' if len(given) > 1 else 'it'} "
            "or add one (e.g. bsp:0.25,asp)"
        )
    if "staleness_lr_floor" in given and config.staleness_lr == "none":
        raise ConfigError(
            f"--staleness-lr-floor {config.staleness_lr_floor:g} applies to --staleness-lr "
            "inverse; --staleness-lr is none: drop it or set --staleness-lr inverse"
        )


def switch_options_problem(names: list[str], schedule: str) -> str:
    """The line refusing switch options `names` for `schedule`, which has no online END."""
    flags = ", ".join("--" + name.replace("_", "-") for name in names)
    verb = "apply" if len(names) > 1 else "applies"
    return (
        f"{flags} {verb} to a schedule with an online END (--schedule online, or e.g. "
        f"bsp:online,asp); schedule {schedule!r} has none: drop them or make it online"
    )


def _check_workload_size(config: TrainOptions) -> None:
    """epochs x training samples is the total workload; bounded so that run lengths,
    schedules and evaluation points stay exact integers of a sane size. A dataset of the
    user's own (an import path) is not built yet: its size is not known here."""
    if is_import_path(config.dataset):
        return
    train_samples = config.mnist1d_samples if config.dataset == "mnist1d" else CIFAR_TRAIN_SAMPLES
    if config.dataset == "pysource":
        train_samples = config.pysource_bytes  # a bound: a sample is many bytes
    train_samples = round(train_samples * (1 - config.val_fraction))
    total = config.epochs * train_samples
    if total > MAX_TOTAL_SAMPLES:
        raise ConfigError(
            f"epochs = {config.epochs:g} over up to {train_samples} training samples is "
            f"{total:.3g} samples; at most {MAX_TOTAL_SAMPLES:.0e} allowed"
        )


def _check_own_code(config: TrainOptions) -> None:
    """A dataset of the user's own needs a model named beside it: the default model is the
    built-in dataset's."""
    if is_import_path(config.dataset) and config.model is None:
        raise ConfigError(
            f"dataset {config.dataset!r} is your own: name its model too (model: a "
            "built-in one or MODULE:NAME); the default models fit the built-in datasets only"
        )


def _check_gpus(config: TrainOptions) -> None:
    gpus = config.gpus_per_worker
    if gpus > 1 and not float(gpus).is_integer():
        raise ConfigError(
            f"gpus_per_worker = {gpus:g} is not allowed; above 1 it must be "
            "a whole number of GPUs (Ray shares a GPU only in fractions of one)"
        )
    if gpus > 0 and all(d == "cpu" for d in role_devices(config).values()):
        raise ConfigError(
            f"gpus_per_worker = {gpus:g} asks for GPUs, but every device is "
            "cpu; use --device cuda or auto, or drop --gpus-per-worker"
        )


def _check_cluster(config: TrainOptions) -> ClusterModel | None:
    if config.runtime == "sim":
        return cluster_model(config)
    if config.cluster is not None:
        raise ConfigError(
            f"cluster {config.cluster!r} applies to --runtime sim (the simulator); a Ray "
            "run's timing is the real one (or --step-time-ms emulation)"
        )
    return None


def _check_optimizer(config: TrainOptions) -> None:
    """Adam's options with SGD, SGD's momentum with Adam: each would do nothing."""
    defaults = {f.name: f.default for f in fields(config)}
    adam = config.optimizer != OptimizerKind.SGD
    if not adam:
        moot = [n for n in ("betas", "eps") if getattr(config, n) != defaults[n]]
        if moot:
            flags = " and ".join("--" + n for n in moot)
            raise ConfigError(
                f"{flags} {'are' if len(moot) > 1 else 'is'} Adam's: give --optimizer adam or "
                "adamw, or drop it"
            )
        return
    if config.momentum != defaults["momentum"]:
        raise ConfigError(
            f"momentum = {config.momentum:g} is SGD's; with optimizer {config.optimizer} "
            "beta1 is the first of --betas (e.g. --betas 0.9,0.999)"
        )
    betas = config.betas
    if betas is not None and (len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas)):
        shown = ",".join(f"{b:g}" for b in betas)
        raise ConfigError(f"betas = {shown}: give two values B1,B2, each in [0, 1)")


def _check_loggers(config: TrainOptions) -> None:
    for name in config.logger or ():
        if name not in LOGGERS:
            raise ConfigError(f"logger {name!r} is not allowed; choose from {', '.join(LOGGERS)}")
        missing = missing_logger_packages(name, config.tracking_uri)
        if missing:
            raise ConfigError(
                f"logger {name!r} needs {', '.join(missing)}, which is not installed: "
                f"pip install 'syncswitch[{name}]'"
            )
    if config.tracking_uri is not None and "mlflow" not in (config.logger or ()):
        raise ConfigError("tracking_uri applies to logger mlflow: add --logger mlflow")


def role_devices(options: TrainOptions) -> dict[str, str]:
    """Each role's device as asked ('auto' still to be resolved against the cluster); the
    evaluator's and servers' 'auto' follows --device."""

    def follow(value: str) -> str:
        return options.device if value == "auto" else value

    return {
        "worker": options.device,
        "evaluator": follow(options.evaluator_device),
        "server": follow(options.server_device),
    }


def is_auto(schedule: str) -> bool:
    """Whether a schedule is 'auto' (a recurring job's stored decision, still to be read)."""
    return schedule.strip().lower() == AUTO_SCHEDULE
