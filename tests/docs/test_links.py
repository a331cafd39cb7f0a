"""Every link the package's docstrings and the documentation give leads to a file that exists
(the package docstring once sent readers to a docs/api.md there never was)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import syncswitch

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
# A markdown link's target: [text](target), leaving out web addresses and in-page anchors.
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")
# Pages the site generates (docs/hooks.py): the changelog is the repository's CHANGELOG.md.
GENERATED = {ROOT / "docs" / "changelog.md": ROOT / "CHANGELOG.md"}


def _local_targets(page: Path) -> list[str]:
    targets = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return [t for t in targets if t]


def test_the_package_docstring_names_pages_that_exist() -> None:
    named = DOCS_PATH.findall(syncswitch.__doc__ or "")
    assert named, "the package docstring names no page"
    assert [p for p in named if not (ROOT / p).is_file()] == []


def test_every_docs_page_a_module_names_exists() -> None:
    missing = [
        f"{module.relative_to(ROOT)}: {name}"
        for module in sorted((ROOT / "syncswitch").rglob("*.py"))
        for name in DOCS_PATH.findall(module.read_text())
        if not (ROOT / name).is_file()
    ]
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_a_page_exists(page: Path) -> None:
    missing = [
        t
        for t in _local_targets(page)
        if not GENERATED.get((page.parent / t).resolve(), page.parent / t).exists()
    ]
    assert missing == []
