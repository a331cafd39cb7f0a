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
_FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)  # every fenced block, so none pairs wrongly
_SHELL = ("", "bash", "sh", "console")


def shell_blocks(text: str) -> list[str]:
    """The bodies of a page's shell blocks (untagged ones too)."""
    return [body for lang, body in _FENCE.findall(text) if lang in _SHELL]


def outside_blocks(text: str) -> str:
    """A page's prose: every fenced block (shell, YAML, JSON, output) removed."""
    return _FENCE.sub("", text)


_ASSIGNMENT = re.compile(r'^(\w+)="([^"]*)"')


def shown_commands(page: Path) -> list[str]:
    """The `syncswitch` commands in a page's shell blocks, with shell variables the block
    sets expanded, comments and `&&` chains taken apart."""
    commands = []
    for block in shell_blocks(page.read_text()):
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

# What the README's set-up installs into .venv, never on PATH until the user activates it.
ENV_TOOLS = ("syncswitch", "python", "pip", "mkdocs", "pytest", "ruff", "mypy")
_LINE_TOOL = re.compile(r"(?:^|&&|\|)\s*(\S+)", re.M)
_INLINE_TOOL = re.compile(r"(?<!`)`(" + "|".join(ENV_TOOLS) + r")\s")
# Pages whose commands a user types: the README, docs/ (cli.md is the parser's own help, and
# architecture.md names commands as code does), the examples' README and their docstrings.
USER_PAGES = [
    ROOT / "README.md",
    *(
        p
        for p in sorted((ROOT / "docs").glob("*.md"))
        if p.name not in ("cli.md", "architecture.md")
    ),
    ROOT / "examples" / "README.md",
    *sorted((ROOT / "examples").glob("*.py")),
]


def shown_programs(page: Path) -> list[str]:
    """The first word of every command in a page's shell blocks (and of each `&&` part)."""
    programs = []
    for block in shell_blocks(page.read_text()):
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.split(" #")[0].strip()
            if not line or line.startswith("#") or _ASSIGNMENT.match(line):
                continue
            programs += [m[1] for m in _LINE_TOOL.finditer(line)]
    return programs


def bare_tools(page: Path) -> list[str]:
    """Commands a page shows that name an environment's tool without `.venv/bin/`: they fail
    in a new shell after the README's set-up, which does not activate the environment."""
    text = page.read_text()
    blocks = [w for w in shown_programs(page) if w in ENV_TOOLS] if page.suffix == ".md" else []
    # Indented commands: a Markdown code block, or a docstring's usage lines.
    blocks += [m[1] for m in re.finditer(r"^ {4}(\S+) ", text, re.M) if m[1] in ENV_TOOLS]
    return blocks + [m[1] for m in _INLINE_TOOL.finditer(outside_blocks(text))]


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_commands_run_without_activating_the_environment(page: Path) -> None:
    assert bare_tools(page) == [], f"spell these as .venv/bin/...: {bare_tools(page)}"


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
            "docs/cli.md is stale: run .venv/bin/python docs/gen_cli.py"
        )
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns


# A user page is read, not searched: about 400 lines at most. The reference pages are the
# parser's help (cli.md) and the code's map (architecture.md); study history (tuning rounds,
# goals checks) lives in benchmarks/results/, linked from the pages.
MAX_USER_PAGE_LINES = 410
_ISSUE_NUMBER = re.compile(r"\bissues? #?[0-9]+", re.I)


@pytest.mark.parametrize(
    "page",
    [p for p in USER_PAGES if p.suffix == ".md"],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_user_pages_are_of_a_readable_length(page: Path) -> None:
    assert len(page.read_text().splitlines()) <= MAX_USER_PAGE_LINES


def test_no_doc_page_names_an_issue_number() -> None:
    """The pages say what was done and why; which tracker entry asked for it is history."""
    found = [
        f"{page.name}: {match[0]}"
        for page in PAGES
        for match in _ISSUE_NUMBER.finditer(page.read_text())
    ]
    assert found == []
