"""Run-directory files are written only when they are ours: a file a run writes in place
(the lock file, the logs it appends to, ray.log) with a second hard link, or owned by
another user, is refused in one line before anything is written (a hard link, unlike a
symlink, is invisible to O_NOFOLLOW and would carry the write outside the directory). A
fresh run refuses an --out holding any file a run writes without the run's config.json
(docs/security.md, "Files").
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.security.helpers import make_run_dir, one_line_error, valid_state

FRESH = ["train", "--runtime", "sim", "--workers", "2", "--epochs", "1", "--no-progress"]
PRECIOUS = "precious\nno line end"  # what a cut last line would look like: never cut


def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside.txt"
    target.write_text(PRECIOUS)
    return target


@pytest.mark.parametrize("name", [".syncswitch.lock", "events.jsonl", "metrics.csv", "ray.log"])
def test_a_hard_linked_file_is_never_written_on_resume(tmp_path, capsys, name) -> None:
    run_dir = make_run_dir(tmp_path, [valid_state()])
    target = outside(tmp_path)
    os.link(target, run_dir / name)
    err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
    assert name in err and "has 2 hard links" in err
    assert target.read_text() == PRECIOUS  # not truncated, not given a process id


@pytest.mark.parametrize("name", [".syncswitch.lock", "ray.log"])
def test_a_fresh_run_refuses_a_hard_linked_file_it_would_write(tmp_path, capsys, name) -> None:
    out = tmp_path / "fresh"
    out.mkdir()
    target = outside(tmp_path)
    os.link(target, out / name)
    err = one_line_error(capsys, [*FRESH, "--out", str(out)])
    assert name in err and "has 2 hard links" in err
    assert target.read_text() == PRECIOUS


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_never_written(tmp_path, capsys) -> None:
    run_dir = make_run_dir(tmp_path, [valid_state()], files={"events.jsonl": PRECIOUS})
    os.chown(run_dir / "events.jsonl", 54321, -1)
    err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
    assert "events.jsonl" in err and "owned by user id 54321, not by you" in err
    assert (run_dir / "events.jsonl").read_text() == PRECIOUS


@pytest.mark.parametrize(
    "name", ["metrics.csv", "events.jsonl", "drops.csv", "timing_signals.csv", "updates.csv"]
)
def test_a_fresh_run_refuses_stray_run_files_without_a_config(tmp_path, capsys, name) -> None:
    out = tmp_path / "strays"
    out.mkdir()
    (out / name).write_text(PRECIOUS)
    err = one_line_error(capsys, [*FRESH, "--out", str(out)])
    assert f"holds files a run writes ({name}) but no config.json" in err
    assert (out / name).read_text() == PRECIOUS
    assert sorted(p.name for p in out.iterdir()) == [name]  # not even ray.log was made
