"""One writer per run directory and per search directory: a lock held for the run's (the
search's) life, so a second `--resume` of a live run, or a second search of the same job,
is refused in one line; a lock left by a dead process blocks nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from syncswitch.errors import UserError
from syncswitch.files import DirectoryBusy, DirectoryLock
from syncswitch.registry import fingerprint
from syncswitch.rundir import names
from tests.security.helpers import make_run_dir, one_line_error, valid_state
from tests.security.test_search_dirs import JOB, search

_HOLD = (
    "import sys, time; from pathlib import Path; from syncswitch.files import DirectoryLock\n"
    "lock = DirectoryLock(Path(sys.argv[1]), sys.argv[2]); print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def _holder(directory: Path, name: str) -> subprocess.Popen:
    """Another process holding `directory`'s lock until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(directory), name], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_second_resume_of_a_live_run_is_one_line_and_touches_nothing(tmp_path, capsys):
    run_dir = make_run_dir(tmp_path, [valid_state()])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    holder = _holder(run_dir, names.LOCK)
    try:
        err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
    finally:
        _kill(holder)
    assert "in use by another syncswitch run" in err and f"process {holder.pid}" in err
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert not (run_dir / names.LIBRARY_LOG).exists()  # not even the library log
    assert {k: v for k, v in after.items() if k != names.LOCK} == before


def test_a_lock_left_by_a_killed_process_blocks_nothing(tmp_path):
    holder = _holder(tmp_path, names.LOCK)
    with pytest.raises(DirectoryBusy):
        DirectoryLock(tmp_path, names.LOCK)
    _kill(holder)  # kill -9: no cleanup ran, the lock file is still there
    assert (tmp_path / names.LOCK).exists()
    with DirectoryLock(tmp_path, names.LOCK):
        pass


def test_the_lock_is_taken_again_by_its_own_process_and_released_with_the_last(tmp_path):
    outer = DirectoryLock(tmp_path, names.LOCK)
    inner = DirectoryLock(tmp_path, names.LOCK)  # e.g. the CLI, then train()'s writer
    inner.release()
    probe = subprocess.run(
        [sys.executable, "-c", _HOLD.replace("time.sleep(120)", ""), str(tmp_path), names.LOCK],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "DirectoryBusy" in probe.stderr  # still held by `outer`
    outer.release()
    outer.release()  # twice is harmless
    with DirectoryLock(tmp_path, names.LOCK):
        pass


def test_the_lock_file_is_never_a_planted_symlink(tmp_path):
    from syncswitch.files import UnsafeFileError

    victim = tmp_path / "victim"
    victim.write_text("precious")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / names.LOCK).symlink_to(victim)
    with pytest.raises(UnsafeFileError):
        DirectoryLock(run_dir, names.LOCK)
    assert victim.read_text() == "precious"


def test_two_concurrent_runs_of_one_directory_the_second_refuses(tmp_path, capsys):
    # A real run in another process; while it goes, this one asks to resume it.
    run_dir = tmp_path / "run"
    argv = [
        "train", "--runtime", "sim", "--workers", "4", "--epochs", "40", "--schedule", "bsp",
        "--mnist1d-samples", "1000", "--no-progress", "--out", str(run_dir),
    ]  # fmt: skip
    first = subprocess.Popen(
        [sys.executable, "-m", "syncswitch.cli.main", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / names.SUMMARY).exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr
            time.sleep(0.05)
        err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
        assert "in use by another syncswitch run" in err, err
        assert first.poll() is None  # the check above held while the first was running
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=120)


def test_a_second_search_of_the_same_job_is_one_line(tmp_path):
    job_dir = tmp_path / "shared" / fingerprint(JOB)[:12]
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({"fingerprint": fingerprint(JOB)}))
    holder = _holder(job_dir, ".syncswitch.lock")
    try:
        with pytest.raises(UserError) as error:
            search(tmp_path)
    finally:
        _kill(holder)
    message = str(error.value)
    assert "\n" not in message and "in use by another search" in message
    search(tmp_path)  # the holder is gone: the search runs


def test_deleting_a_live_runs_lock_file_does_not_free_it(tmp_path, capsys):
    # The lock is on the directory itself: the file only says who holds it.
    run_dir = make_run_dir(tmp_path, [valid_state()])
    holder = _holder(run_dir, names.LOCK)
    try:
        (run_dir / names.LOCK).unlink()
        err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
        assert "in use by another syncswitch run" in err
        with pytest.raises(DirectoryBusy):
            DirectoryLock(run_dir, names.LOCK)
    finally:
        _kill(holder)
    DirectoryLock(run_dir, names.LOCK).release()  # free once its process has ended
