"""`syncswitch train`: every TrainConfig field is a flag; `--config FILE` supplies defaults."""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from syncswitch.cli.registry_option import add_registry_argument
from syncswitch.config import (
    ConfigError,
    TrainConfig,
    config_fields,
    field_default,
    load_config_file,
    load_list_file,
    make_config,
)

_EXAMPLES = """examples:
  syncswitch train                                   # 8 workers, MNIST-1D, BSP for 25%, then ASP
  syncswitch train --schedule bsp                    # pure BSP baseline
  syncswitch train --schedule auto                   # this job's stored switch point
  syncswitch train --schedule bsp:0.1,asp:0.8,bsp --momentum-at-switch ramp
  syncswitch train --step-time-ms 20 --jitter-sigma 0.2   # emulate 20 ms GPU steps
  syncswitch train --step-time-ms 20 --stragglers slow.yaml --online-policy elastic
  syncswitch train --config job.yaml --seed 3        # file values, overridden by flags
  syncswitch train --resume runs/20261203-101500-bsp025-asp   # continue a killed run
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
    add_config_arguments(parser)
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a killed run from its last good checkpoint, with the job it was started "
        "with (only --progress/--no-progress, --ray-address, --logger and --tracking-uri may "
        "be given beside it; a saved tracking URI is not reused)",
    )
    add_registry_argument(parser, "where --schedule auto looks the job up")
    parser.set_defaults(handler=run)
    return parser


def add_config_arguments(parser: argparse.ArgumentParser, exclude: Collection[str] = ()) -> None:
    """--config and one flag per TrainConfig field (but `exclude`); `search` shares them."""
    parser.add_argument(
        "--config", metavar="FILE", help="YAML or TOML file whose keys mirror these flags"
    )
    for f in config_fields():
        if f.name in exclude:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = field_default(f)
        help_text = f.metadata["help"].replace("%", "%%")
        if str(f.type) == "bool":
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{help_text} (default: {default})",
            )
            continue
        choices = f.metadata.get("choices")
        shown = f" (default: {default})" if default is not None else ""
        parser.add_argument(
            flag,
            default=None,
            action="append" if f.metadata.get("repeatable") else "store",
            metavar="FILE" if f.metadata.get("from_file") else _metavar(str(f.type), choices),
            help=help_text + shown,
        )


def _metavar(type_name: str, choices: list[str] | None) -> str:
    if choices:
        return "{" + ",".join(choices) + "}"
    base = type_name.replace("| None", "").strip()
    return {"int": "N", "float": "X", "list[float]": "X,X,..."}.get(base, "TEXT")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    values: dict[str, Any] = load_config_file(args.config) if args.config else {}
    for f in config_fields():
        given = getattr(args, f.name, None)  # None also for a flag the command leaves out
        if given is not None:
            values[f.name] = load_list_file(given, f.name) if f.metadata.get("from_file") else given
    return make_config(values)


_RESUME_OVERRIDES = ("progress", "ray_address", "logger", "tracking_uri")
# Not taken from the run directory's config.json: a run directory may come from elsewhere,
# and nothing read from it may choose where the job connects.
_NOT_RESUMED = ("tracking_uri",)


def config_for_resume(args: argparse.Namespace) -> TrainConfig:
    """The job a run directory was started with; a resumed run is the same job."""
    run_dir = Path(args.resume)
    path = run_dir / "config.json"
    if not path.is_file():
        raise ConfigError(f"cannot resume {str(run_dir)!r}: it holds no config.json")
    given = [
        "--" + f.name.replace("_", "-")
        for f in config_fields()
        if getattr(args, f.name, None) is not None and f.name not in _RESUME_OVERRIDES
    ]
    if args.config or given:
        flags = ", ".join(given + (["--config"] if args.config else []))
        raise ConfigError(
            f"--resume continues the job as it was started; drop {flags} (allowed beside it: "
            "--progress/--no-progress, --ray-address, --logger, --tracking-uri)"
        )
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"cannot resume: {str(path)!r} is not valid JSON ({error})") from None
    known = {f.name for f in config_fields()}
    values = {k: v for k, v in saved.items() if k in known and k not in _NOT_RESUMED}
    for name in _RESUME_OVERRIDES:
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    values["out"] = str(run_dir)
    return make_config(values)


def run(args: argparse.Namespace) -> int:
    if args.resume:
        config = config_for_resume(args)
        from syncswitch.runtime.coordinator import train

        return _report(train(config, resume=True))
    config = config_from_args(args)
    schedule_source = None
    if config.schedule_is_auto:
        from syncswitch.timing.auto import describe_source, resolve_auto_schedule

        config, schedule_source = resolve_auto_schedule(config, args.registry)
        print(f"syncswitch: {describe_source(schedule_source)}")
    # Imported here so that `--help` and input errors answer without loading Ray.
    from syncswitch.runtime.coordinator import train

    return _report(train(config, schedule_source=schedule_source))


def _report(result: Any) -> int:
    summary = result.summary
    keys = ("final_accuracy", "best_accuracy", "wall_time_s", "samples_per_s", "switches")
    print(json.dumps({k: summary[k] for k in keys}, indent=2, default=str))
    print(f"results written to {result.run_dir}/ (summary.json, metrics.csv, updates.csv, ...)")
    return 0
