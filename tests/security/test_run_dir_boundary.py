"""Issue 24 case 3: the run directory is a boundary, on a first run and on --resume.

Nothing in it is followed out of it (ray.log, tensorboard/, mlflow.db and SQLite's side files,
the logs read back), nothing in it blocks the run (a FIFO), nothing it says chooses a logger,
and a finished run or one whose workload was changed is not resumed. Each case ends in one
line before Ray starts, with nothing written outside the run directory.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from syncswitch.cli.train import config_for_resume
from tests.security.helpers import SMALL_JOB, make_run_dir, one_line_error, valid_state
from tests.security.test_resume import resume_args

RESUME = ["train", "--resume"]


def resume(capsys, run_dir: Path, *flags: str) -> str:
    return one_line_error(capsys, [*RESUME, str(run_dir), "--no-progress", *flags])


@pytest.mark.parametrize("kind", ["dangling", "file"])
def test_ray_log_that_is_a_link_is_never_followed(tmp_path, capsys, kind):
    run_dir = make_run_dir(tmp_path, [valid_state()])
    target = tmp_path / "outside.txt"
    if kind == "file":
        target.write_text("precious\n")
    (run_dir / "ray.log").symlink_to(target)
    err = resume(capsys, run_dir)
    assert "ray.log" in err and "symbolic link" in err
    if kind == "file":
        assert target.read_text() == "precious\n"
    else:
        assert not target.exists()  # a dangling link used to create its target


def test_ray_log_that_is_a_fifo_is_one_line_not_a_hang(tmp_path, capsys):
    run_dir = make_run_dir(tmp_path, [valid_state()])
    os.mkfifo(run_dir / "ray.log")
    err = resume(capsys, run_dir)
    assert "ray.log" in err


def test_a_first_run_refuses_a_planted_ray_log_link(tmp_path, capsys):
    out = tmp_path / "fresh"
    out.mkdir()
    target = tmp_path / "outside.txt"
    (out / "ray.log").symlink_to(target)
    err = one_line_error(capsys, ["train", "--out", str(out), "--workers", "2", "--no-progress"])
    assert "ray.log" in err
    assert not target.exists()


def test_a_tensorboard_directory_that_is_a_link_is_refused(tmp_path, capsys):
    run_dir = make_run_dir(tmp_path, [valid_state()])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "tensorboard").symlink_to(elsewhere, target_is_directory=True)
    err = resume(capsys, run_dir, "--logger", "tensorboard")
    assert "TensorBoard directory" in err and "symbolic link" in err
    assert list(elsewhere.iterdir()) == []


def test_a_link_inside_the_tensorboard_directory_is_refused(tmp_path, capsys):
    run_dir = make_run_dir(tmp_path, [valid_state()])
    (run_dir / "tensorboard").mkdir()
    (run_dir / "tensorboard" / "events.out.tfevents.1").symlink_to(tmp_path / "outside")
    err = resume(capsys, run_dir, "--logger", "tensorboard")
    assert "symbolic link" in err
    assert not (tmp_path / "outside").exists()


@pytest.mark.parametrize("name", ["mlflow.db", "mlflow.db-journal", "mlflow.db-wal"])
def test_an_mlflow_database_link_never_reaches_its_target(tmp_path, capsys, name):
    registry = tmp_path / "registry.db"
    with sqlite3.connect(registry) as connection:
        connection.execute("CREATE TABLE jobs (id INTEGER)")
    connection.close()
    before = registry.read_bytes()
    run_dir = make_run_dir(tmp_path, [valid_state()])
    (run_dir / name).symlink_to(registry)
    err = resume(capsys, run_dir, "--logger", "mlflow")
    assert name in err and "symbolic link" in err
    assert registry.read_bytes() == before


def test_the_loggers_on_resume_come_from_the_command_line_only(tmp_path, capsys):
    run_dir = make_run_dir(tmp_path, [], config={**SMALL_JOB, "logger": ["mlflow"]})
    config = config_for_resume(resume_args("--resume", str(run_dir)))
    assert not config.logger
    assert "not used" in capsys.readouterr().out
    config = config_for_resume(resume_args("--resume", str(run_dir), "--logger", "tensorboard"))
    assert config.logger == ["tensorboard"]


def test_a_finished_run_is_not_resumed(tmp_path, capsys):
    from tests.rundir.samples import sample_summary

    summary = sample_summary(final_value=0.9)
    assert summary.complete
    run_dir = make_run_dir(
        tmp_path, [valid_state()], files={"summary.json": json.dumps(summary.to_plain())}
    )
    before = (run_dir / "summary.json").read_bytes()
    err = resume(capsys, run_dir)
    assert "finished" in err
    assert (run_dir / "summary.json").read_bytes() == before


def test_a_lowered_workload_does_not_resume_past_its_end(tmp_path, capsys):
    state = valid_state()
    state["servers"][0]["samples"] = 10 * 160  # 10 epochs of the 160 training samples
    run_dir = make_run_dir(tmp_path, [state], config={**SMALL_JOB, "epochs": 1.0})
    err = resume(capsys, run_dir)
    assert "no longer matches the checkpoint" in err


def test_events_and_csvs_read_back_are_never_followed_or_blocked_on(tmp_path):
    from syncswitch.errors import RunDirError
    from syncswitch.rundir import load_run

    run_dir = make_run_dir(tmp_path, [])
    (tmp_path / "secret.jsonl").write_text('{"kind": "x"}\n')
    (run_dir / "events.jsonl").symlink_to(tmp_path / "secret.jsonl")
    with pytest.raises(RunDirError, match="symbolic link"):
        load_run(run_dir)
    (run_dir / "events.jsonl").unlink()
    os.mkfifo(run_dir / "metrics.csv")
    try:  # skipped or refused; before, a FIFO among the CSVs blocked the reader forever
        load_run(run_dir)
    except RunDirError as error:
        assert "metrics.csv" in str(error)


def test_a_changed_workload_is_refused_even_before_its_end(tmp_path, capsys):
    # Taken half an epoch into a 10-epoch run; config.json now says 2 epochs. The checkpoint
    # is not past the new end, but it names the workload it was taken in.
    state = valid_state()
    state["servers"][0]["samples"] = 80
    state["total_samples"] = 10 * 160
    run_dir = make_run_dir(tmp_path, [state], config={**SMALL_JOB, "epochs": 2.0})
    err = resume(capsys, run_dir)
    assert "workload of 1600 samples" in err and "no longer matches the checkpoint" in err
