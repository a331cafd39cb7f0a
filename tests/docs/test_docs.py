"""The documentation never drifts from the code: every `syncswitch ...` command shown in the
README and docs/ parses, and docs/cli.md is what the parser says (no training is run)."""

from __future__ import annotations

import os
import re
import runpy
import shlex
from pathlib import Path

import pytest

from syncswitch.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```(?:bash|sh|console)?\n(.*?)```", re.S)
_ASSIGNMENT = re.compile(r'^(\w+)="([^"]*)"')


def shown_commands(page: Path) -> list[str]:
    """The `syncswitch` commands in a page's shell blocks, with shell variables the block
    sets expanded, comments and `&&` chains taken apart."""
    commands = []
    for block in _BLOCK.findall(page.read_text()):
        variables: dict[str, str] = {}
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.split(" #")[0].strip()
            if line.startswith("#"):
                continue
            if match := _ASSIGNMENT.match(line):
                variables[match[1]] = match[2]
                continue
            for name, value in variables.items():
                line = line.replace(f"${name}", value)
            for part in line.split("&&"):
                words = part.strip().split(maxsplit=1)
                # `syncswitch` or `.venv/bin/syncswitch`, not a `syncswitch/` package tree
                if words and (words[0] == "syncswitch" or words[0].endswith("/bin/syncswitch")):
                    commands.append(part.strip())
    return commands


SHOWN = [(page.relative_to(ROOT).as_posix(), c) for page in PAGES for c in shown_commands(page)]


def test_the_pages_show_commands() -> None:
    pages = {page for page, _ in SHOWN}
    assert "README.md" in pages and "docs/guide.md" in pages
    assert len(SHOWN) > 30


@pytest.mark.parametrize(("page", "command"), SHOWN)
def test_every_shown_command_parses(page: str, command: str) -> None:
    args = shlex.split(command)[1:]
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as stop:  # --help and --version exit 0; a bad flag exits 2
        assert stop.code == 0, f"{page}: {command!r} does not parse"
        return
    assert parsed.handler is not None


def test_the_cli_reference_is_generated_from_the_parser() -> None:
    generator = runpy.run_path(str(ROOT / "docs" / "gen_cli.py"))
    columns = os.environ.get("COLUMNS")
    try:
        assert (ROOT / "docs" / "cli.md").read_text() == generator["render"](), (
            "docs/cli.md is stale: run python docs/gen_cli.py"
        )
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
