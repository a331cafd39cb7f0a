"""Every file a run writes follows the umask, as open() would: summary.json, config.json and
the weights (written atomically through a temp file) get the same mode as the CSVs."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from syncswitch.files import current_umask, write_atomic


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_atomic_write_gets_the_umasks_mode(tmp_path: Path, umask: None) -> None:
    assert current_umask() == 0o027
    write_atomic(tmp_path / "summary.json", "{}")
    assert _mode(tmp_path / "summary.json") == 0o640


def test_every_file_of_a_run_gets_the_same_mode(tmp_path: Path, umask: None) -> None:
    out = tmp_path / "run"
    argv = ["train", "--runtime", "sim", "--epochs", "0.2", "--mnist1d-samples", "1000"]
    assert main([*argv, "--workers", "2", "--no-progress", "--out", str(out)]) == 0
    modes = {p.relative_to(out).as_posix(): _mode(p) for p in out.rglob("*") if p.is_file()}
    assert {"summary.json", "config.json", "final_weights.pt", "metrics.csv"} <= set(modes)
    assert set(modes.values()) == {0o640}, modes
