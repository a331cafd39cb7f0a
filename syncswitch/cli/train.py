"""`syncswitch train`: every TrainConfig field is a flag; `--config FILE` supplies defaults."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from syncswitch.cli.interrupted import entries, interrupted
from syncswitch.cli.registry_option import add_registry_argument
from syncswitch.cli.signals import signals_stop
from syncswitch.config import (
    AUTO_SCHEDULE,
    MAX_CONFIG_FILE_BYTES,
    ConfigError,
    TrainConfig,
    config_fields,
    field_default,
    load_config_file,
    load_list_file,
    make_config,
)
from syncswitch.config.checks import short
from syncswitch.config.declare import (
    JOB_GROUP,
    LOCAL_GROUP,
    OUTPUT_GROUP,
    SCHEDULE_GROUP,
    flag_groups,
    flag_names,
    from_flags_only,
    named_again,
    resume_overrides,
)
from syncswitch.config.validation import (
    SWITCH_OPTIONS,
    SwitchOptionsError,
    switch_options_problem,
)
from syncswitch.errors import RunDirError, UserError
from syncswitch.import_path import is_import_path
from syncswitch.run_summary import logger_lines, print_summary, summary_json
from syncswitch.rundir import (
    LIBRARY_LOG,
    default_run_dir,
    names,
    read_config,
)
from syncswitch.terminal import library_output_to

_EXAMPLES = """examples:
  syncswitch train                                   # 8 workers, MNIST-1D, online: BSP, then ASP
  syncswitch train --schedule bsp                    # pure BSP baseline
  syncswitch train --schedule auto                   # this job's stored switch point
  syncswitch train --schedule bsp:0.1,asp:0.8,bsp --momentum-at-switch ramp
  syncswitch train --step-time-ms 20 --jitter-sigma 0.2   # emulate 20 ms GPU steps
  syncswitch train --step-time-ms 20 --stragglers slow.yaml --straggler-policy elastic
  syncswitch train --config job.yaml --seed 3        # file values, overridden by flags
  syncswitch train --resume runs/20261203-101500-bsp0.25-asp   # continue a killed run
  syncswitch train --logger tensorboard,mlflow       # also log to TensorBoard and MLflow
  syncswitch train --json                            # end with JSON for scripts
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "train",
        help="train one job",
        description="Train a model data-parallel with a parameter server on Ray. Progress is "
        "measured in samples: phase ends and evaluation points are fractions of the total "
        "workload (--epochs passes over the training set).",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = add_config_arguments(parser)
    groups[OUTPUT_GROUP].add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a killed run from its last good checkpoint, with the job it was started "
        "with (only --progress/--no-progress, --ray-address, --faults, --logger and "
        "--tracking-uri may be given beside it; the cluster address, injected faults and a "
        "tracking URI are never taken from the run directory; a run of your own --model or "
        "--dataset MODULE:NAME needs it named again, the same: a run directory never chooses "
        "code to import)",
    )
    groups[OUTPUT_GROUP].add_argument(
        "--verbose",
        action="store_true",
        help=f"show Ray's and PyTorch's own output on the terminal (by default it goes to "
        f"RUN_DIR/{LIBRARY_LOG} and the terminal shows only syncswitch's lines)",
    )
    groups[OUTPUT_GROUP].add_argument(
        "--json",
        action="store_true",
        help="end with the machine-readable summary (JSON on stdout) instead of the table",
    )
    add_registry_argument(groups[SCHEDULE_GROUP], "where --schedule auto looks the job up")
    parser.set_defaults(handler=run)
    return parser


# `--help` shows the flags in the groups their fields declare (config/declare.py), in
# GROUPS' order; a field that declares none (a subclass's own) is listed under the first, so
# that it still has a flag.
FLAG_GROUPS: dict[str, tuple[str, ...]] = flag_groups(config_fields())


def flag_group(field_name: str) -> str:
    return next((g for g, names_ in FLAG_GROUPS.items() if field_name in names_), JOB_GROUP)


def add_config_arguments(
    parser: argparse.ArgumentParser, exclude: Collection[str] = ()
) -> dict[str, Any]:
    """--config and one flag per TrainConfig field (but `exclude`), in the argument groups
    of FLAG_GROUPS (returned by title, for the caller's own flags); `search` shares them."""
    groups: dict[str, Any] = {title: parser.add_argument_group(title) for title in FLAG_GROUPS}
    groups[JOB_GROUP].add_argument(
        "--config", metavar="FILE", help="YAML or TOML file whose keys mirror these flags"
    )
    for f in config_fields():
        if f.name in exclude:
            continue
        group = groups[flag_group(f.name)]
        flags = flag_names(f)
        default = field_default(f)
        help_text = f.metadata["help"].replace("%", "%%")
        if len(flags) > 1:
            help_text += f" ({', '.join(flags[1:])}: its old spelling, an alias)"
        if str(f.type) == "bool":
            group.add_argument(
                *flags,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{help_text} (default: {default})",
            )
            continue
        choices = f.metadata.get("choices")
        shown = f" (default: {default})" if default is not None else ""
        group.add_argument(
            *flags,
            dest=f.name,
            default=None,
            action="append" if f.metadata.get("repeatable") else "store",
            metavar="FILE" if f.metadata.get("from_file") else _metavar(str(f.type), choices),
            help=help_text + shown,
        )
    return groups


def _metavar(type_name: str, choices: list[str] | None) -> str:
    if choices:
        return "{" + ",".join(choices) + "}"
    base = type_name.replace("| None", "").strip()
    return {"int": "N", "float": "X", "list[float]": "X,X,..."}.get(base, "TEXT")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return make_config(config_values(args))


def config_values(args: argparse.Namespace) -> dict[str, Any]:
    """The options the command line gives, over those of its --config file; not yet
    validated (that happens once, when the TrainConfig is built from them)."""
    values: dict[str, Any] = load_config_file(args.config) if args.config else {}
    for f in config_fields():
        given = getattr(args, f.name, None)  # None also for a flag the command leaves out
        if given is not None:
            values[f.name] = load_list_file(given, f.name) if f.metadata.get("from_file") else given
    return values


# The options that tune a local phase (their --help group): given for a schedule without one,
# they would do nothing, so a named schedule refuses them.
LOCAL_OPTIONS = flag_groups(config_fields())[LOCAL_GROUP]


# What a resumed run takes from the command line, as each field declares it (`Resume`). The
# cluster address, the fault plan, the loggers and the tracking URI are taken only from there:
# a run directory can come from anywhere (see docs/security.md), and its config.json must not
# choose where the job connects or its figures are sent, nor inject faults.
_RESUME_OVERRIDES = resume_overrides(config_fields())
_FROM_FLAGS_ONLY = from_flags_only(config_fields())
# Said in one line when other flags are given beside --resume (and in --resume's help).
_RESUME_ALLOWED = "--progress/--no-progress, --ray-address, --faults, --logger, --tracking-uri"
# Options that may name the user's code (`--model mypkg.models:Net`): a resumed run never
# imports a path read from config.json; the command line names it again, the same.
_NAMED_AGAIN = named_again(config_fields())


def config_for_resume(args: argparse.Namespace) -> TrainConfig:
    """The job a run directory was started with; a resumed run is the same job."""
    run_dir = Path(args.resume)
    given = [
        flag_names(f)[0]
        for f in config_fields()
        if getattr(args, f.name, None) is not None
        and f.name not in _RESUME_OVERRIDES + _NAMED_AGAIN
    ]
    if args.config or given:
        raise ConfigError(_drop(given + (["--config"] if args.config else [])))
    saved = read_saved_config(run_dir)
    check_named_again(run_dir, saved, args)
    known = {f.name for f in config_fields()}
    values = {k: v for k, v in saved.items() if k in known and k not in _FROM_FLAGS_ONLY}
    # A run from before validation splits had none: it resumes as it was started.
    values.setdefault("val_fraction", 0.0)
    if saved.get("ray_address"):
        print(
            "syncswitch: the run directory's config.json names a Ray cluster; it is ignored "
            "(a resumed run joins a cluster only when --ray-address or RAY_ADDRESS says so)"
        )
    if saved.get("logger") not in (None, [], ["csv"], "csv"):
        print(
            "syncswitch: the run directory's config.json names loggers; they are not used "
            "(a resumed run logs to TensorBoard or MLflow only when --logger says so)"
        )
    for f in config_fields():
        given_value = getattr(args, f.name, None)
        if f.name not in _RESUME_OVERRIDES or given_value is None:
            continue
        from_file = f.metadata.get("from_file")
        values[f.name] = load_list_file(given_value, f.name) if from_file else given_value
    values["out"] = str(run_dir)
    try:
        return make_config(values)
    except SwitchOptionsError:
        # Switch options the run's fixed schedule makes moot (kept from `--schedule auto`
        # before they were set aside, or given through the Python API) were not used: they
        # are left out, as a new run leaves them out.
        return make_config({k: v for k, v in values.items() if k not in SWITCH_OPTIONS})


def check_named_again(run_dir: Path, saved: dict[str, Any], args: argparse.Namespace) -> None:
    """A run directory's config.json may name the user's code (an import path), but it is
    never trusted to choose code to import (docs/security.md): the command line names the
    same paths again beside --resume, or the run is not resumed."""
    missing = []
    for name in _NAMED_AGAIN:
        flag, given, recorded = "--" + name.replace("_", "-"), getattr(args, name), saved.get(name)
        if not is_import_path(recorded):
            if given is not None:  # a built-in one: fixed, as every option of the job
                raise ConfigError(_drop([flag]))
        elif given is None:
            missing.append(f"{flag} {short(recorded)}")
        elif given != recorded:
            raise ConfigError(
                f"cannot resume {str(run_dir)!r}: {flag} {short(given)} is not the {name} it "
                f"was started with ({short(recorded)}); a resumed run is the same job"
            )
    if missing:
        raise ConfigError(
            f"cannot resume {str(run_dir)!r}: its {names.CONFIG} names code to import "
            f"({', '.join(missing)}), and a run directory never chooses code to run: give "
            f"{' and '.join(m.split()[0] for m in missing)} again beside --resume, if that is "
            "the code you mean"
        )


def _drop(flags: list[str]) -> str:
    return (
        f"--resume continues the job as it was started; drop {', '.join(flags)} (allowed "
        f"beside it: {_RESUME_ALLOWED})"
    )


def read_saved_config(run_dir: Path) -> dict[str, Any]:
    """A run directory's config.json as a dict, or one ConfigError line saying why not.

    The file is read only if it is a regular file inside the directory (not a symlink, FIFO
    or device) and of bounded size.
    """
    try:
        return read_config(run_dir, MAX_CONFIG_FILE_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"cannot resume {str(run_dir)!r}: it holds no {names.CONFIG}") from None
    except RunDirError as error:
        raise ConfigError(f"cannot resume {str(run_dir)!r}: {error}") from None


def run(args: argparse.Namespace) -> int:
    if args.resume:
        config = config_for_resume(args)
        return _train_and_report(args, config, resume=True)
    # The job is built (and so validated) once, with its final schedule and run directory;
    # `schedule: auto` first builds the job as given, whose fingerprint finds the schedule.
    values = config_values(args)
    given = [name for name in SWITCH_OPTIONS if name in values]
    schedule_source = None
    set_aside: list[str] = []
    if _is_auto(values.get("schedule")):
        from syncswitch.recurring.auto import auto_schedule, describe_source

        values["schedule"], schedule_source = auto_schedule(make_config(values), args.registry)
        print(f"syncswitch: {describe_source(schedule_source)}", file=sys.stderr)
        if schedule_source["kind"] == "registry":
            # A stored decision is a fixed share: the switch options are moot, so set aside.
            set_aside = given
            values = {k: v for k, v in values.items() if k not in set_aside}
    if values.get("out") is None and isinstance(values.get("schedule", ""), str):
        # The run directory is fixed before the run starts: the library log goes into it.
        schedule = values.get("schedule") or _default("schedule")
        values["out"] = str(default_run_dir(schedule))
    config = _config_with_switch_options(values, given)
    local = [name for name in LOCAL_OPTIONS if name in values]
    if local and not any(p.spec.local_steps for p in config.parsed_schedule().phases):
        if schedule_source is None:  # a schedule the user named: the flags would do nothing
            raise ConfigError(
                f"{_flags(local)} {'apply' if len(local) > 1 else 'applies'} to a local "
                f"phase (e.g. --schedule bsp:0.25,local-16); schedule {config.schedule!r} has "
                "none: drop them or add a local phase"
            )
        set_aside += local  # a stored decision's schedule: said below, as for switch options
    if set_aside:
        print(
            f"syncswitch: {_flags(set_aside)} not used: the stored decision fixes the BSP "
            f"share ({config.schedule})",
            file=sys.stderr,
        )
    return _train_and_report(args, config, schedule_source=schedule_source)


def _config_with_switch_options(values: dict[str, Any], given: list[str]) -> TrainConfig:
    """The job; switch options given (flags or --config) for a schedule with no online phase
    are refused, naming each one given (validation names those set to other than their
    defaults: it cannot know which were given)."""
    given = [name for name in given if name in values]
    try:
        config = make_config(values)
    except SwitchOptionsError as error:
        if not given:
            raise
        raise ConfigError(switch_options_problem(given, error.schedule)) from None
    if given and config.parsed_schedule().online_index is None:
        raise ConfigError(switch_options_problem(given, config.schedule))
    return config


def _flags(names: list[str]) -> str:
    return ", ".join("--" + name.replace("_", "-") for name in names)


def _is_auto(schedule: object) -> bool:
    return isinstance(schedule, str) and schedule.strip().lower() == AUTO_SCHEDULE


def _default(name: str) -> Any:
    return next(field_default(f) for f in config_fields() if f.name == name)


def _train_and_report(args: argparse.Namespace, config: TrainConfig, **train_args: Any) -> int:
    # Imported here so that `--help` and input errors answer without loading Ray.
    from syncswitch.rundir import create_run_dir, lock_run_dir
    from syncswitch.runtime.run_dir_checks import refuse_used_run_dir
    from syncswitch.runtime.train import check_runnable, train

    if config.out is None:  # run() sets it, but not for a file's `out: none`: built again
        config = replace(config, out=str(default_run_dir(config.schedule)))
    run_dir = Path(str(config.out))
    if not train_args.get("resume"):
        refuse_used_run_dir(run_dir)  # before the log file is made in it
    check_runnable(config)  # e.g. --device cuda without CUDA: no run directory made
    if is_import_path(config.model) or is_import_path(config.dataset):
        from syncswitch.workloads.imports import user_code_arguments

        train_args.update(user_code_arguments(config))  # only ever from the command line
    made_here = not run_dir.exists()
    create_run_dir(run_dir)  # `--out` naming a file is one line, not a traceback in mkdir
    before = entries(run_dir)
    try:
        # One process writes a run: a second `--resume` of a live run is refused here,
        # before it touches even the library log (train()'s writer takes the same lock again).
        with lock_run_dir(run_dir), signals_stop(config.runtime == "sim"):
            if args.verbose:
                result = train(config, print_summary=False, **train_args)
                library_log = None
            else:
                with library_output_to(run_dir / LIBRARY_LOG) as library_log:
                    result = train(config, print_summary=False, **train_args)
    except UserError:
        # Refused at start-up (no cluster at that address, a cluster without the GPUs asked
        # for, no CIFAR files): the directory this command made holds no result, so it goes too.
        if made_here:
            _remove_unused_run_dir(run_dir)
        raise
    except KeyboardInterrupt:
        raise interrupted(run_dir, before=before, made_here=made_here) from None
    _store_online_share(args, config, result.summary)
    if args.json:
        print(summary_json(result.summary, result.run_dir))
    else:
        print_summary(
            result.summary,
            result.run_dir,
            library_log=library_log,
            loggers=logger_lines(config, result.run_dir),
        )
    return 0


def _remove_unused_run_dir(run_dir: Path) -> None:
    """Remove a run directory that holds no result: no summary, no checkpoint."""
    if (run_dir / names.SUMMARY).exists() or (run_dir / names.CHECKPOINTS).exists():
        return
    shutil.rmtree(run_dir, ignore_errors=True)


def _store_online_share(args: argparse.Namespace, config: TrainConfig, summary: Any) -> None:
    """An online run's chosen share goes to the registry for `--schedule auto` next time."""
    if summary.online_timing is None:
        return
    from syncswitch.recurring.online import online_share, record_online_decision, unworthy_share
    from syncswitch.registry import RegistryError

    if online_share(config, summary) is None:
        return  # not a `bsp:online,asp` run that left BSP: no share to speak of
    if (why := unworthy_share(summary)) is not None:
        print(
            f"syncswitch: the online run's BSP share was not stored for `--schedule auto`: {why}",
            file=sys.stderr,
        )
        return
    try:
        stored = record_online_decision(config, summary, args.registry)
    except RegistryError as error:
        print(f"syncswitch: the online decision was not stored: {error}", file=sys.stderr)
        return
    if stored is not None:
        print(
            f"syncswitch: stored the online run's BSP share {stored.fraction:g} as decision "
            f"#{stored.id} for job {stored.fingerprint[:12]} (`--schedule auto` reuses it)",
            file=sys.stderr,
        )
