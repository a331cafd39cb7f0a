"""A full disk, and the cut lines it (or a crash) leaves: the run stops in one line, every
file stays parseable, and `--resume` continues to completion once space is freed.

No small file system can be mounted unprivileged, so the disk fills at the write call: the
run directory's unbuffered append writes part of a chosen file's row, then fails with ENOSPC,
as a real full disk does."""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from syncswitch.errors import DiskFull, UserError
from syncswitch.files import append_bytes, drop_torn_tail
from syncswitch.rundir import writer as writer_module
from syncswitch.rundir.writer import GROWING_LOGS, RunWriter

SIM_JOB = [
    "--runtime", "sim", "--workers", "4", "--epochs", "2", "--mnist1d-samples", "1000",
    "--batch-size", "16", "--eval-every", "0.25", "--checkpoint-every", "0.1", "--no-progress",
    "--schedule", "bsp:0.25,asp",
]  # fmt: skip


class DiskFillsAt:
    """`append_bytes` as a filling disk: the `calls`-th append to `path` writes half its
    bytes and fails with ENOSPC, and so does every append after it (the disk stays full)."""

    def __init__(self, path: Path, calls: int) -> None:
        self.path = path
        self.calls = calls
        self.full = False

    def __call__(self, fd: int, data: bytes) -> None:
        if not self.full and self._is_target(fd):
            self.calls -= 1
            if self.calls <= 0:
                append_bytes(fd, data[: len(data) // 2])
                self.full = True
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        append_bytes(fd, data)

    def _is_target(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False


def _fill_at(monkeypatch: pytest.MonkeyPatch, path: Path, calls: int) -> DiskFillsAt:
    filling = DiskFillsAt(path, calls)
    monkeypatch.setattr(writer_module, "append_bytes", filling)
    return filling


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(None not in row and None not in row.values() for row in rows), path
    return rows


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("name", ["updates.csv", "metrics.csv"])
def test_a_full_disk_stops_in_one_line_and_the_run_resumes_to_completion(
    tmp_path, capfd, monkeypatch, name
):
    reference, run_dir = tmp_path / "reference", tmp_path / "run"
    assert main(["train", *SIM_JOB, "--out", str(reference)]) == 0
    capfd.readouterr()
    filling = _fill_at(monkeypatch, run_dir / name, calls=3 if name == "metrics.csv" else 5)
    assert main(["train", *SIM_JOB, "--out", str(run_dir)]) == 1
    assert filling.full
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "no space left" in err and name in err and "--resume" in err
    assert _summary(run_dir)["status"].startswith("failed: DiskFull")
    assert not (run_dir / name).read_bytes().endswith(b"\n")  # the row the disk cut

    monkeypatch.setattr(writer_module, "append_bytes", append_bytes)  # space freed
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    err = capfd.readouterr().err
    assert f"{name}'s last line was cut" in err and "Traceback" not in err
    summary = _summary(run_dir)
    counts = summary["gradients"]
    assert summary["status"] == "complete" and counts["unaccounted"] == 0
    assert counts["sent"] == counts["applied"] + sum(counts["dropped"].values())
    for log in ("updates.csv", "metrics.csv", "drops.csv"):
        _rows(run_dir / log)  # every row whole
    samples = [row["samples"] for row in _rows(run_dir / "metrics.csv")]
    assert samples == [row["samples"] for row in _rows(reference / "metrics.csv")]


def test_a_full_disk_in_a_writer_is_disk_full_naming_the_file(tmp_path, monkeypatch):
    writer = RunWriter(tmp_path / "run", {}, {})
    _fill_at(monkeypatch, tmp_path / "run" / "metrics.csv", calls=1)
    with pytest.raises(DiskFull, match=r"metrics\.csv"):
        writer.metric({"samples": 1})
    writer.close()  # nothing buffered is retried at close


@pytest.mark.parametrize("name", GROWING_LOGS)
def test_a_cut_last_line_of_each_log_is_dropped_on_resume(tmp_path, capsys, name):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    header = b"samples,time_s,rule\r\n" if name.endswith(".csv") else b""
    whole = header + (b"1,0.5,a\r\n" if header else b'{"event": "x"}\n')
    (run_dir / name).write_bytes(whole + (b"2,0.7,b" if header else b'{"event": "y", "a'))
    RunWriter(run_dir, {}, {}, resume_at=(5, 5.0)).close()
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and f"{name}'s last line was cut" in said[0]
    assert (run_dir / name).read_bytes() == whole


def test_a_cut_header_leaves_an_empty_log_that_gets_its_header_again(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "updates.csv").write_bytes(b"version,work")
    RunWriter(run_dir, {}, {}, resume_at=(5, 5.0)).close()
    text = (run_dir / "updates.csv").read_bytes()
    assert text.startswith(b"version,worker,") and text.endswith(b"\r\n") and text.count(b"\n") == 1


def test_a_malformed_whole_line_is_still_refused(tmp_path):
    # Only a line with no line end is a cut; a whole line that is wrong was written so.
    from syncswitch.errors import ConfigError

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "updates.csv").write_bytes(b"samples,time_s\r\n1,2\r\nx,y\r\n")
    with pytest.raises(ConfigError, match="line 3 is malformed"):
        RunWriter(run_dir, {}, {}, resume_at=(5, 5.0))


@pytest.mark.parametrize(
    ("content", "kept"),
    [(b"", b""), (b"abc", b""), (b"a\nb\n", b"a\nb\n"), (b"a\nb", b"a\n"), (b"a\r\nb\r", b"a\r\n")],
)
def test_drop_torn_tail_keeps_the_complete_lines(tmp_path, content, kept):
    path = tmp_path / "log"
    path.write_bytes(content)
    assert drop_torn_tail(path) == len(content) - len(kept)
    assert path.read_bytes() == kept


def test_drop_torn_tail_scans_back_past_one_chunk(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"head\n" + b"x" * 200_000)
    assert drop_torn_tail(path) == 200_000 and path.read_bytes() == b"head\n"


def test_drop_torn_tail_never_follows_a_symlink(tmp_path):
    from syncswitch.files import UnsafeFileError

    outside = tmp_path / "victim"
    outside.write_bytes(b"keep\nthis")
    (tmp_path / "log").symlink_to(outside)
    with pytest.raises(UnsafeFileError):
        drop_torn_tail(tmp_path / "log")
    assert outside.read_bytes() == b"keep\nthis"


def test_a_full_disk_outside_the_logs_is_one_line_too(tmp_path, capsys, monkeypatch):
    # e.g. a checkpoint or the registry: an OSError with ENOSPC that reaches the CLI.
    from syncswitch.cli import jobs

    def full(_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x.db"))

    monkeypatch.setattr(jobs, "run", full)
    assert main(["jobs"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no space left" in err and "x.db" in err


def test_another_os_error_is_not_taken_for_a_full_disk(monkeypatch, tmp_path):
    import functools

    from syncswitch.cli import jobs
    from syncswitch.files import read_regular

    # An OSError raised in this package's own code (not a callback of the user's, which
    # test_user_code_failures.py covers) keeps its traceback.
    # (the command's arguments land in max_bytes, unused: the open fails first)
    monkeypatch.setattr(jobs, "run", functools.partial(read_regular, tmp_path / "absent"))
    with pytest.raises(FileNotFoundError):
        main(["jobs"])


@pytest.mark.parametrize(
    ("code", "kind", "fragment"),
    [(errno.ENOSPC, DiskFull, "no space left"), (errno.EACCES, UserError, "cannot be made")],
)
def test_a_search_directory_that_cannot_be_made_is_one_line(
    tmp_path, monkeypatch, code, kind, fragment
):
    from syncswitch.recurring import search_dirs

    def refused(path, _data):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(search_dirs, "write_json_atomic", refused)
    with pytest.raises(kind, match=fragment) as error:
        search_dirs.claim_job_dir(tmp_path / "searches" / "abc", "abc" * 10)
    assert "\n" not in str(error.value)


def test_rows_the_checkpoint_holds_but_metrics_csv_lost_are_written_again(tmp_path, capsys):
    run_dir = tmp_path / "run"
    RunWriter(run_dir, {}, {}).close()
    first = RunWriter(run_dir, {}, {}, resume_at=(0, 0.0))
    first.metric({"samples": 448, "val_accuracy": 0.1})
    first.close()
    with (run_dir / "metrics.csv").open("ab") as handle:
        handle.write(b"0.2,800,0.5")  # the row a full disk cut
    resumed = RunWriter(run_dir, {}, {}, resume_at=(1000, 1.0))
    resumed.restore_metrics([{"samples": 448}, {"samples": 800, "val_accuracy": 0.2}])
    resumed.close()
    rows = _rows(run_dir / "metrics.csv")
    assert [(r["samples"], r["val_accuracy"]) for r in rows] == [("448", "0.1"), ("800", "0.2")]
