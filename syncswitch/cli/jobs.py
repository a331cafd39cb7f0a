"""`syncswitch jobs`: the registry's jobs, their trials and stored decisions."""

from __future__ import annotations

import argparse
from typing import Any

from syncswitch.cli.registry_option import add_registry_argument
from syncswitch.errors import ConfigError
from syncswitch.terminal import printable

_EXAMPLES = """examples:
  syncswitch jobs                         # every stored job, its trials and latest decision
  syncswitch jobs --show 3fa9c2           # one job (fingerprint prefix): trials, decisions
  syncswitch jobs --registry team.db
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "jobs",
        help="list stored jobs, search trials and timing decisions",
        description="List the jobs in the registry (by fingerprint: see 'Job identity' in\n"
        "docs/recurring-jobs.md), how many search trials each has, and the switch point\n"
        "decided for it.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--show",
        metavar="FINGERPRINT",
        default=None,
        help="show one job (any unique prefix of its fingerprint): its description, every "
        "trial and every decision",
    )
    add_registry_argument(parser, "to read")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from syncswitch.registry import Registry, RegistryLocation

    location = RegistryLocation.resolve(args.registry)
    prefix = _fingerprint_prefix(args.show) if args.show is not None else None
    # Paths, descriptions and reasons come from the registry and from users: printed as
    # they are, never read as rich markup ("[/]" in a path would crash it) or emoji codes,
    # and with their control characters escaped (a registry may be shared: no escape
    # sequence it holds reaches the terminal).
    console = Console(
        highlight=False, markup=False, emoji=False, width=None if _terminal() else 160
    )
    if not location.exists() or _empty_file(location.sqlite_path):
        # Listing never creates a registry (an empty file is not one either).
        console.print(
            f"no registry at {printable(location.display)} yet: `syncswitch search` creates it"
        )
        return 0
    with Registry(location, create=False) as registry:
        if prefix is not None:
            _show(console, registry, prefix)
        else:
            _list(console, registry)
    return 0


def _list(console: Any, registry: Any) -> None:
    from rich.table import Table

    from syncswitch.core.timing.fraction_search import format_fraction

    overview = registry.overview()
    console.print(f"registry: {printable(registry.location.display)}")
    if not overview:
        console.print("no jobs stored yet: `syncswitch search` adds them")
        return
    table = Table(show_lines=False)
    for name in (
        "job",
        "model",
        "dataset",
        "workers",
        "batch",
        "lr",
        "epochs",
        "timing",
        "trials",
        "decision",
        "decided (UTC)",
    ):
        table.add_column(name, no_wrap=True)
    for item in overview:
        job = item.job.description
        latest = item.latest
        decision = _decision_cell(latest, format_fraction) if latest else "-"
        cells = (
            item.job.fingerprint[:12],
            str(job.get("model")),
            _dataset(job),
            str(job.get("workers")),
            str(job.get("batch_size")),
            _number(job.get("lr")),
            _number(job.get("epochs")),
            _emulation(job),
            f"{item.complete_trials}/{item.trials}",
            decision,
            _when(latest.created) if latest else "-",
        )
        table.add_row(*(printable(cell) for cell in cells))
    console.print(table)
    console.print("trials: complete/all; `syncswitch jobs --show JOB` for one job's details")


def _decision_cell(latest: Any, format_fraction: Any) -> str:
    """The latest decision in a cell: its share, number, and where it came from."""
    if latest.kind == "online":
        return f"{format_fraction(latest.fraction)} (#{latest.id}, online run)"
    return (
        f"{format_fraction(latest.fraction)} (#{latest.id}, search, {latest.repeats} "
        f"repeat{'s' if latest.repeats != 1 else ''}, tol {latest.tolerance:g})"
    )


def _fingerprint_prefix(text: str) -> str:
    """A fingerprint prefix as given to --show: hex digits only (fingerprints are SHA-256)."""
    prefix = text.strip().lower()
    if len(prefix) > 64 or any(c not in "0123456789abcdef" for c in prefix):
        shown = " ".join(text.split())[:70]
        raise ConfigError(
            f"--show {shown!r} is not allowed; give the start of a job fingerprint: up to 64 "
            "hex digits (0-9, a-f), as `syncswitch jobs` lists them"
        )
    return prefix


def _show(console: Any, registry: Any, prefix: str) -> None:
    from rich.table import Table

    from syncswitch.core.timing.fraction_search import format_fraction

    matches = registry.find_jobs(prefix)
    if not matches:
        raise ConfigError(
            f"no job's fingerprint starts with {prefix!r} in registry "
            f"{registry.location.display}; `syncswitch jobs` lists them"
        )
    if len(matches) > 1:
        raise ConfigError(
            f"{prefix!r} matches {len(matches)} jobs "
            f"({', '.join(m.fingerprint[:12] for m in matches[:5])}); give more characters"
        )
    job = matches[0]
    console.print(f"job {printable(job.fingerprint)}  (stored {_when(job.created)} UTC)")
    for key, value in job.description.items():
        console.print(printable(f"  {key}: {value}"))
    trials = Table(title="trials")
    for name in ("fraction", "seed", "status", "final acc %", "wall time s", "ran with", "run"):
        trials.add_column(name, no_wrap=True)
    for trial in registry.trials(job):
        cells = (
            format_fraction(trial.fraction),
            str(trial.seed),
            trial.status,
            f"{100 * trial.final_accuracy:.2f}" if trial.final_accuracy is not None else "-",
            f"{trial.wall_time_s:.1f}" if trial.wall_time_s is not None else "-",
            "alone" if (trial.concurrent or 1) <= 1 else f"{trial.concurrent} at once",
            trial.run_dir or "-",
        )
        trials.add_row(*(printable(cell) for cell in cells))
    console.print(trials)
    decisions = registry.decisions(job)
    if not decisions:
        console.print("no decision yet: run `syncswitch search` with this job's options")
        return
    for decision in decisions:
        if decision.kind == "online":
            how = "from an online run"
        else:
            how = (
                f"from a search, tolerance {decision.tolerance:g} points, {decision.repeats} "
                f"repeat{'s' if decision.repeats != 1 else ''}"
            )
        console.print(
            f"decision #{decision.id} ({_when(decision.created)} UTC): BSP fraction "
            f"{format_fraction(decision.fraction)}, {how} - {printable(decision.reason)}"
        )
    console.print(
        "`syncswitch train --schedule auto` with this job's options uses the latest decision"
    )


def _dataset(job: dict) -> str:
    if job.get("dataset") == "mnist1d" and job.get("mnist1d_samples"):
        return f"mnist1d ({job['mnist1d_samples']})"
    if job.get("dataset") == "pysource" and isinstance(job.get("corpus_sha256"), str):
        return f"pysource (text {job['corpus_sha256'][:12]})"  # which interpreter's text
    return str(job.get("dataset"))


def _number(value: Any) -> str:
    """A stored job's number as `:g`; a value this code did not write (a string, a list: the
    registry may be shared) is shown as it is, never a traceback."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}"
    return "-" if value is None else str(value)


def _when(value: Any) -> str:
    """A stored time; NULL or anything but a datetime (a registry edited by hand) is "-"."""
    from datetime import datetime

    return value.strftime("%Y-%m-%d %H:%M") if isinstance(value, datetime) else "-"


def _emulation(job: dict) -> str:
    cluster = job.get("cluster")
    if job.get("runtime") == "sim" and isinstance(cluster, dict):
        compute = cluster.get("compute")
        step_ms = compute.get("step_time_ms") if isinstance(compute, dict) else None
        return f"SIMULATED, {_number(step_ms) if step_ms is not None else '?'} ms steps"
    step = job.get("step_time_ms") or 0
    if not step:
        return "off"
    text = f"{_number(step)} ms"
    if job.get("jitter_sigma"):
        text += f", jitter {_number(job['jitter_sigma'])}"
    if job.get("speed_factors"):
        text += ", speed factors"
    if job.get("stragglers"):
        text += ", stragglers"
    return text


def _terminal() -> bool:
    import sys

    return sys.stdout.isatty()


def _empty_file(path: Any) -> bool:
    """An existing regular file of 0 bytes (lstat: a link or FIFO is left to the registry's
    own checks, which refuse it in one line)."""
    import os
    import stat

    if path is None:
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == 0
