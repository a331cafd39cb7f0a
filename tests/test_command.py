"""The hints a run prints name `syncswitch` the way the user's shell can run it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from syncswitch.command import program


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with an installed, not activated .venv; its interpreter is this process's."""
    bin_dir = tmp_path / "repo" / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "syncswitch"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    return bin_dir


def test_not_activated_it_is_the_environments_path_from_here(venv: Path) -> None:
    repo = venv.parent.parent
    assert program(cwd=repo, path="/usr/bin:/bin") == ".venv/bin/syncswitch"
    elsewhere = repo.parent
    assert program(cwd=elsewhere, path="/usr/bin") == "repo/.venv/bin/syncswitch"


def test_outside_the_checkout_it_is_the_absolute_path(venv: Path, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    assert program(cwd=tmp_path / "other", path="") == str(venv / "syncswitch")


def test_activated_it_is_the_bare_name(venv: Path) -> None:
    assert program(cwd=venv, path=f"/usr/bin:{venv}") == "syncswitch"
