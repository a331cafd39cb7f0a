"""`syncswitch search`: find a recurring job's switch point by trial runs, store it for reuse."""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from typing import Any

from syncswitch.cli.registry_option import add_registry_argument
from syncswitch.cli.train import add_config_arguments, config_from_args
from syncswitch.command import program
from syncswitch.errors import ConfigError
from syncswitch.import_path import is_import_path

# Set per trial by the search, so not options of it.
_PER_TRIAL = ("schedule", "out", "progress")

_EXAMPLES = """examples:
  syncswitch search --workers 8 --step-time-ms 20 --jitter-sigma 0.2
  syncswitch search --config job.yaml --repeats 3 --tolerance 0.3 --parallel auto
  syncswitch train --schedule auto --workers 8 --step-time-ms 20 --jitter-sigma 0.2
  syncswitch jobs                       # stored jobs and decisions

The search trains the job with full BSP (the baseline) and with BSP for a fraction f of the
samples, then ASP: f = 1/2 first, halved while the mean final accuracy over --repeats seeds
stays within --tolerance points of BSP's mean, then bisected between the last failing and
the last holding fraction down to --resolution. Every trial is stored in the registry as it
finishes; running the same command again resumes and reruns no finished trial. The
decision is what `syncswitch train --schedule auto` uses for this job.

--seed is the first of the repeats' seeds (seed, seed+1, ...): every fraction is trained
with the same seeds, so fractions are compared on the same initialisations and data orders.
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "search",
        help="find and store a recurring job's BSP->ASP switch point",
        description="Search the smallest BSP fraction after which switching to ASP still\n"
        "reaches full BSP's final accuracy (within a tolerance), by trial trainings of the\n"
        "job given by the options below: the same as `syncswitch train`'s, without\n"
        "--schedule, --out and --progress, which the search sets per trial.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser, exclude=_PER_TRIAL)
    search = parser.add_argument_group("search")
    search.add_argument(
        "--tolerance",
        metavar="POINTS",
        default="0.5",
        help="accuracy points a fraction's mean may lose against BSP's mean (default: 0.5)",
    )
    search.add_argument(
        "--repeats",
        metavar="N",
        default="2",
        help="trials per fraction, with seeds seed..seed+N-1; decisions use their mean "
        "(default: 2)",
    )
    search.add_argument(
        "--resolution",
        metavar="FRACTION",
        default="1/64",
        help="stop refining when the failing and holding fractions are this close; also the "
        "smallest fraction tried, e.g. 1/64 or 0.015625 (default: 1/64)",
    )
    search.add_argument(
        "--max-trials",
        metavar="N",
        default="20",
        help="trial budget, the BSP baseline's included; when it is spent the smallest "
        "holding fraction so far is chosen (default: 20)",
    )
    search.add_argument(
        "--parallel",
        metavar="N|auto",
        default="1",
        help="trials at once: 1 (default, comparable wall times), N, or auto (as many as the "
        "Ray cluster's free CPUs allow, workers+servers+1 per trial); a local Ray instance "
        "is started with room for N. Parallel trials share the CPUs, so their wall times are "
        "not comparable with trials run alone",
    )
    search.add_argument(
        "--search-dir",
        metavar="DIR",
        default=None,
        help="where trial run directories and the report go, in a subdirectory per job "
        "(DIR/<job fingerprint prefix>/; default DIR: searches)",
    )
    add_registry_argument(search, "where trials and the decision are stored")
    search.add_argument(
        "--progress",
        dest="show_progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show the search's progress (default: True)",
    )
    parser.set_defaults(handler=run)
    return parser


def options_from_args(args: argparse.Namespace) -> Any:
    from syncswitch.recurring.search_runner import AUTO, SearchOptions

    parallel_text = str(args.parallel).strip().lower()
    parallel: int | str = (
        AUTO if parallel_text == AUTO else _number(parallel_text, "parallel", int, "N or auto")
    )
    return SearchOptions(
        tolerance=_number(args.tolerance, "tolerance", float, "a number of points >= 0"),
        repeats=_number(args.repeats, "repeats", int, "an integer >= 1"),
        resolution=_fraction(args.resolution),
        max_trials=_number(args.max_trials, "max_trials", int, "an integer"),
        parallel=parallel,
        search_dir=args.search_dir,
    )


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    own = [name for name in ("model", "dataset") if is_import_path(getattr(config, name))]
    if own:
        raise ConfigError(
            f"syncswitch search trains the built-in models and datasets; --{own[0]} "
            f"{getattr(config, own[0])!r} is your own code (train it with `syncswitch train`)"
        )
    if config.dataset == "pysource":
        # The search's tolerance is in accuracy points, higher being better.
        raise ConfigError(
            "syncswitch search judges trials by accuracy; dataset 'pysource' is judged by its "
            "loss: train it with `syncswitch train` (--schedule online, or a fixed schedule)"
        )
    options = options_from_args(args)
    options.spec(config.seed)  # bad settings fail here, before the registry or Ray
    # Imported here so that `--help` and input errors answer without loading Ray.
    from syncswitch.recurring.search_report import trace_table
    from syncswitch.recurring.search_runner import SearchError, run_search
    from syncswitch.registry import Registry
    from syncswitch.runtime.ray.search_trainer import RayTrainer

    registry = Registry(args.registry)
    listener = _Console(args.show_progress, simulated=config.runtime == "sim")
    try:
        listener.say(f"registry: {registry.location.display}")
        result = run_search(
            config, options, registry, trainer=RayTrainer(config), listener=listener
        )
    except KeyboardInterrupt:
        print(
            "syncswitch: search interrupted; finished trials are stored in "
            f"{registry.location.display}: run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    except SearchError as error:
        print(f"syncswitch: error: {error}", file=sys.stderr)
        return 1
    finally:
        listener.close()
        registry.close()
    print()
    print(trace_table(result))
    print()
    print(f"report: {result.files['table']}, {result.files['plot']}, {result.files['csv']}")
    print(
        f"reuse it: {program()} train --schedule auto with the same options "
        f"(job {result.fingerprint[:12]}, decision #{result.stored.id})"
    )
    return 0


class _Console:
    """Progress lines on stderr: what the search is testing, each trial as it ends."""

    def __init__(self, enabled: bool, *, simulated: bool = False) -> None:
        from rich.console import Console

        self.enabled = enabled
        self.clock = "SIMULATED time" if simulated else "wall time"
        # Paths and reasons are printed as they are, never read as rich markup or emoji codes.
        self.console = Console(stderr=True, highlight=False, markup=False, emoji=False)
        self._status: Any = None
        self._last = ""
        if enabled and self.console.is_terminal:
            self._status = self.console.status("starting")
            self._status.start()

    def say(self, text: str) -> None:
        if self.enabled:
            self.console.print(text)

    def step(self, text: str) -> None:
        if text != self._last:
            self._last = text
            self.say(text)
        if self._status is not None:
            self._status.update(text)

    def trial_started(self, key: Any, running: int) -> None:
        from syncswitch.core.timing.fraction_search import format_fraction

        if self._status is not None:
            self._status.update(
                f"{self._last}: training fraction {format_fraction(key.fraction)} seed "
                f"{key.seed} ({running} running)"
            )

    def trial_finished(self, run: Any) -> None:
        from syncswitch.core.timing.fraction_search import format_fraction

        accuracy = "-" if run.final_accuracy is None else f"{100 * run.final_accuracy:.2f}%"
        wall = "-" if run.wall_time_s is None else f"{run.wall_time_s:.1f} s"
        origin = {"registry": " (stored earlier)", "disk": " (recovered from its run dir)"}.get(
            run.source, ""
        )
        self.say(
            f"  trial {format_fraction(run.key.fraction):>6} seed {run.key.seed}: "
            f"{run.status}, final accuracy {accuracy}, {self.clock} {wall}{origin}"
        )

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _number(text: Any, name: str, kind: type, allowed: str) -> Any:
    try:
        value = kind(str(text).strip())
    except (ValueError, OverflowError):
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        raise ConfigError(f"{name} = {_shown(text)} is not allowed; it must be {allowed}")
    return value


def _fraction(text: Any) -> float:
    allowed = "a fraction such as 1/64 or 0.015625"
    try:
        value = float(Fraction(str(text).strip()))
    except (ValueError, ZeroDivisionError, OverflowError):
        # OverflowError: e.g. 1e400, a valid Fraction too large for a float.
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(f"resolution = {_shown(text)} is not allowed; it must be {allowed}")
    return value


def _shown(text: Any) -> str:
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= 60 else flat[:57] + "...")
