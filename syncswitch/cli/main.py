"""Entry point: `syncswitch <command> ...`; user mistakes exit 2 with one line, no traceback."""

from __future__ import annotations

import argparse
import errno
import sys
from importlib import metadata

from syncswitch.cli import calibrate as calibrate_command
from syncswitch.cli import jobs as jobs_command
from syncswitch.cli import report as report_command
from syncswitch.cli import search as search_command
from syncswitch.cli import train as train_command
from syncswitch.errors import Interrupted, TrainingStalled, UserError, is_disk_full
from syncswitch.terminal import printable
from syncswitch.user_code import user_failure


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncswitch",
        description="Data-parallel PyTorch training on Ray whose synchronization protocol "
        "(BSP, ASP, SSP) switches in place while it runs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train_command.add_parser(commands)
    search_command.add_parser(commands)
    jobs_command.add_parser(commands)
    report_command.add_parser(commands)
    calibrate_command.add_parser(commands)
    return parser


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, through the package metadata)."""
    try:
        return metadata.version("syncswitch")
    except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UserError as error:
        print(f"syncswitch: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except TrainingStalled as error:
        print(
            f"syncswitch: stopped: {one_line(str(error))}; results so far are in the run directory",
            file=sys.stderr,
        )
        return 1
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:  # a path given (or made of one) too long
            where = f" {str(error.filename)[:80]!r}" if error.filename else ""
            print(f"syncswitch: error: a file name is too long{where}", file=sys.stderr)
            return 2
        if not is_disk_full(error):
            return _stopped_by_user_code(error)
        # A write outside the run's logs (a checkpoint, the registry, a search's marker):
        # space, not a bug, so one line too.
        where = f" writing {error.filename!r}" if error.filename else ""
        print(
            f"syncswitch: stopped: no space left on the device{where} ({error.strerror}); "
            "free space and run the command again (a run continues with --resume RUN_DIR)",
            file=sys.stderr,
        )
        return 1
    except Interrupted as interrupted:  # a run's Ctrl-C: where it is and how to go on
        print(f"syncswitch: {interrupted}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("syncswitch: interrupted; results so far are in the run directory", file=sys.stderr)
        return 130
    except Exception as error:
        return _stopped_by_user_code(error)


def _stopped_by_user_code(error: Exception) -> int:
    """The user's code (a model, a dataset, a metric) or Ray on its behalf raised: one line,
    its escapes escaped. Anything else is a bug of ours, and its traceback is shown."""
    failure = user_failure(error)
    if failure is None:
        raise error
    print(
        f"syncswitch: stopped: {one_line(failure)}; a run directory it made says failed "
        "(--resume RUN_DIR continues it once the code is fixed)",
        file=sys.stderr,
    )
    return 1


# A message quotes what the user gave, which may be long or hold line breaks; the terminal
# gets one line of readable length whatever it was.
MAX_MESSAGE_CHARS = 1000


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` as one line: whitespace runs are one space, other control characters (an
    escape sequence quoted from a file) are escaped, and it is cut at `limit`."""
    flat = printable(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
