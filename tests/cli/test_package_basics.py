"""Package basics a newcomer looks for: --version, py.typed, a licence, grouped --help."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import syncswitch
from syncswitch.cli.main import build_parser, main
from syncswitch.cli.train import FLAG_GROUPS
from syncswitch.config import config_fields

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"syncswitch {metadata.version('syncswitch')}"


def test_package_ships_py_typed_and_states_its_licence() -> None:
    assert (Path(syncswitch.__file__).parent / "py.typed").is_file()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["syncswitch"]
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_the_version_is_the_changelogs_latest_release() -> None:
    """pyproject.toml, `syncswitch.__version__` and the CHANGELOG's latest heading agree."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["version"] == syncswitch.__version__
    releases = [
        line.split()[1]
        for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
        if line.startswith("## ") and line.split()[1][0].isdigit()
    ]
    assert releases[0] == syncswitch.__version__


def test_train_help_names_the_default_schedule() -> None:
    help_text = _train_parser().format_help()
    assert "BSP for 25%" not in help_text
    assert "online: BSP, then ASP" in help_text


def _train_parser():  # type: ignore[no-untyped-def]
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    return commands.choices["train"]


def test_train_help_is_grouped_and_keeps_every_flag() -> None:
    parser = _train_parser()
    titles = [group.title for group in parser._action_groups]
    for title in FLAG_GROUPS:
        assert title in titles
    text = parser.format_help()
    for f in config_fields():
        assert "--" + f.name.replace("_", "-") in text
    named = [name for names in FLAG_GROUPS.values() for name in names]
    assert len(named) == len(set(named)), "a field is listed in two groups"
    # A new field must be placed on purpose (else it would fall into the job group unseen).
    assert sorted(f.name for f in config_fields()) == sorted(named)
    # Each config flag sits in its group, not in the catch-all "options" block.
    options = next(g for g in parser._action_groups if g.title == "options")
    assert [a.option_strings for a in options._group_actions] == [["-h", "--help"]]
