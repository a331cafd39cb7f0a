"""docs/architecture.md's recipes name only files that exist.

A recipe is found by its heading: a row of the "Where to change what" table whose first cell
is its name ("add a protocol"), and a `###` section of that name ("Add an option"). Every
file path either one names must exist: a `dir/name.ext` path relative to the repository or to
syncswitch/, and a bare `name.ext` relative to the folder of the path named before it in the
same text ("tests/core/sync/test_protocol.py, test_synchronizer.py"); a bare name that is not
a module (config.json, summary.json) is a run directory's file, not checked. Each of the three
recipes must be there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
RECIPES = ("add a protocol", "add an option", "add a built-in dataset")
REQUIRED = RECIPES
# A file path: folders (optional) and a name with one of these suffixes.
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|toml|yaml|yml|json|txt|cfg))\b")
# Where a path with a folder may be relative to.
BASES = (ROOT, ROOT / "syncswitch")


def recipe_text(doc: str, name: str) -> str:
    """The table row named `name` and the `###` section of that name, joined ("" if
    neither)."""
    parts = []
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0].lower() == name.lower():
            parts.append(line)
    heading = re.compile(rf"^###\s+{re.escape(name)}\s*$", re.IGNORECASE | re.MULTILINE)
    found = heading.search(doc)
    if found is not None:
        rest = doc[found.end() :]
        end = re.search(r"^#{1,3}\s", rest, re.MULTILINE)
        parts.append(rest[: end.start()] if end else rest)
    return "\n".join(parts)


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    """Every path `text` names that is not a file (see the module's docstring)."""
    bases = (root, root / "syncswitch") if root != ROOT else BASES
    missing = []
    folder: Path | None = None  # the folder of the last path with one, for bare names
    for match in PATH.finditer(text):
        named = match.group(1)
        if "/" in named:
            found = next((base / named for base in bases if (base / named).is_file()), None)
            if found is None:
                missing.append(named)
                continue
            folder = found.parent
        elif named.endswith(".py"):
            candidates = [folder / named] if folder is not None else [b / named for b in bases]
            if not any(c.is_file() for c in candidates):
                missing.append(named)
    return missing


def _doc() -> str:
    return ARCHITECTURE.read_text()


@pytest.mark.parametrize("name", RECIPES)
def test_every_file_a_recipe_names_exists(name: str) -> None:
    text = recipe_text(_doc(), name)
    if not text:
        assert name not in REQUIRED, f"docs/architecture.md has no recipe {name!r}"
        pytest.skip(f"no recipe {name!r} in docs/architecture.md yet")
    assert PATH.search(text), f"recipe {name!r} names no file"
    assert missing_paths(text) == [], f"recipe {name!r} names files that do not exist"


def test_the_option_recipe_names_the_files_an_option_touches() -> None:
    text = recipe_text(_doc(), "add an option")
    for path in (
        "config/options.py",
        "config/job_options.py",
        "config/validation.py",
        "config/components.py",
        "control/plan.py",
        "docs/cli.md",
    ):
        assert path in text, f"the option recipe does not name {path}"


def test_the_check_finds_a_recipe_by_its_row_and_its_section() -> None:
    doc = (
        "| to ... | change |\n|---|---|\n| add a thing | a/b.py, c.py |\n"
        "### Add a thing\n\nd/e.md\n### Other\n\nf/g.py\n"
    )
    text = recipe_text(doc, "add a thing")
    assert "a/b.py" in text and "d/e.md" in text and "f/g.py" not in text
    assert recipe_text(doc, "add nothing") == ""


def test_the_check_sees_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "syncswitch" / "core").mkdir(parents=True)
    (tmp_path / "syncswitch" / "core" / "a.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("")
    text = "core/a.py, b.py; docs/x.md, docs/gone.md; core/a.py and a.py; config.json"
    assert missing_paths(text, root=tmp_path) == ["b.py", "docs/gone.md"]
