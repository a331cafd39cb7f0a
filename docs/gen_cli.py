"""Write docs/cli.md, the command-line reference, from the parser itself (so it never drifts).

    .venv/bin/python docs/gen_cli.py            # rewrite docs/cli.md
    .venv/bin/python docs/gen_cli.py --check    # exit 1 when docs/cli.md is stale

tests/docs/test_docs.py runs the check, so a changed flag without a regenerated page fails CI.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "cli.md"
# argparse wraps help text to the terminal's width: a fixed one makes the page reproducible.
WIDTH = "100"


def render() -> str:
    os.environ["COLUMNS"] = WIDTH
    from syncswitch.cli.main import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = [
        "# Command-line reference\n",
        "Generated from the parser by `.venv/bin/python docs/gen_cli.py`; every option of "
        "every command, as `--help` prints it. The commands are named `syncswitch` here, as "
        "on PATH after `source .venv/bin/activate`; without activating, run "
        "`.venv/bin/syncswitch` from the repository root.\n",
        "## syncswitch\n",
        "```text\n" + parser.format_help().rstrip() + "\n```\n",
    ]
    for name, sub in commands.choices.items():
        parts.append(f"## syncswitch {name}\n")
        parts.append("```text\n" + sub.format_help().rstrip() + "\n```\n")
    return "\n".join(parts)


def main() -> int:
    check = "--check" in sys.argv[1:]
    text = render()
    if check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} is stale: run .venv/bin/python docs/gen_cli.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"written {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
