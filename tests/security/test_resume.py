"""Resuming from a run directory that may come from elsewhere (docs/security.md).

Each test is one case of issue 16: what a tampered directory could do before, and the one
line the user gets instead. None of them starts Ray: every refusal comes first.
"""

import argparse
import json
import os
import threading
from pathlib import Path

import pytest

from syncswitch.cli.train import add_parser, config_for_resume
from syncswitch.control.resume_check import load_resume_checkpoint
from syncswitch.core.reliability.checkpoints import CheckpointStore
from tests.security.helpers import (
    SMALL_JOB,
    make_config,
    make_run_dir,
    model_parameters,
    one_line_error,
    valid_state,
)


def resume_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def test_resume_never_takes_the_cluster_or_faults_from_the_run_directory(tmp_path, capsys):
    tampered = {
        **SMALL_JOB,
        "ray_address": "ray://attacker.example:10001",
        "faults": [{"kind": "crash", "worker": 0, "at": 0.1}],
    }
    run_dir = make_run_dir(tmp_path, [], config=tampered)
    config = config_for_resume(resume_args("--resume", str(run_dir)))
    assert config.ray_address is None and config.faults is None
    assert config.workers == SMALL_JOB["workers"]  # the job itself is still the saved one
    assert "ignored" in capsys.readouterr().out
    # Both may still be given on the command line, which is trusted.
    faults = tmp_path / "faults.yaml"
    faults.write_text("- {kind: hang, worker: 1, at: 0.5}\n")
    flags = ("--ray-address", "127.0.0.1:6379", "--faults", str(faults))
    config = config_for_resume(resume_args("--resume", str(run_dir), *flags))
    assert config.ray_address == "127.0.0.1:6379"
    assert config.faults == [{"kind": "hang", "worker": 1, "at": 0.5}]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"[1, 2, 3]", "holds a JSON list"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary", "not UTF-8"),
        (b'{"workers": ', "not valid JSON"),
        (b"[" * 100_000, "not valid JSON"),  # nested past the parser's recursion limit
        (b'{"workers": 1' + b"0" * 5000 + b"}", "not valid JSON"),  # an int too long to read
    ],
)
def test_a_config_json_that_is_not_an_object_is_one_line(tmp_path, capsys, content, fragment):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_bytes(content)
    assert fragment in one_line_error(capsys, ["train", "--resume", str(run_dir)])


def test_config_json_must_be_a_regular_file_inside_the_run_directory(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / "config.json")  # reading it would block forever
    assert "FIFO" in one_line_error(capsys, ["train", "--resume", str(run_dir)])
    (run_dir / "config.json").unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(SMALL_JOB))
    (run_dir / "config.json").symlink_to(elsewhere)
    assert "symbolic link" in one_line_error(capsys, ["train", "--resume", str(run_dir)])


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (lambda s: {"servers": "x"}, "server states"),
        (lambda s: {**s, "format_version": 3}, "format_version 3; this code reads versions 1"),
        (lambda s: {**s, "servers": [{**s["servers"][0], "pinned": 1}]}, "server 0: pinned = 1"),
        (lambda s: {**s, "controller": {"metrics": []}}, "controller record"),
        (lambda s: {**s, "servers": [{"optimizer": {}}]}, "server 0"),
        (
            lambda s: {**s, "servers": [{**s["servers"][0], "samples": "many"}]},
            "server 0",
        ),
        (
            lambda s: {
                **s,
                "servers": [
                    {**s["servers"][0], "optimizer": {"weights": [1.0], "momentum_buffer": None}}
                ],
            },
            "weights",
        ),
    ],
)
def test_a_checkpoint_with_a_valid_hash_but_wrong_contents_is_one_line(
    tmp_path, capsys, damage, fragment
):
    run_dir = make_run_dir(tmp_path, [damage(valid_state())])
    err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
    assert "wrong contents" in err and fragment in err


def test_a_malformed_metrics_row_on_resume_is_one_line(tmp_path, capsys):
    header = "time_s,samples,fraction,version,protocol,test_accuracy,test_loss\n"
    rows = "1.0,0,0.0,0,bsp,0.1,2.3\n2.0,not-a-number,0.1,5,bsp,0.2,2.1\n"
    run_dir = make_run_dir(tmp_path, [valid_state()], files={"metrics.csv": header + rows})
    err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
    assert "metrics.csv" in err and "line 3" in err and "'samples'" in err


def test_a_log_that_is_a_symlink_out_of_the_run_directory_is_never_written(tmp_path, capsys):
    outside = tmp_path / "victim.txt"
    outside.write_text("precious\n")
    run_dir = make_run_dir(tmp_path, [valid_state()])
    (run_dir / "events.jsonl").symlink_to(outside)
    err = one_line_error(capsys, ["train", "--resume", str(run_dir), "--no-progress"])
    assert "symbolic link" in err
    assert outside.read_text() == "precious\n"


def test_a_checkpoint_that_is_a_fifo_is_refused_without_hanging(tmp_path):
    # A manifest claiming an empty file: before, its size matched and the read blocked.
    run_dir = make_run_dir(tmp_path, [valid_state()])
    checkpoints = run_dir / "checkpoints"
    newest = checkpoints / "checkpoint-000002.pt"
    os.mkfifo(newest)
    manifest = json.loads((checkpoints / "checkpoint-000001.json").read_text())
    manifest.update(file=newest.name, sequence=2, bytes=0, sha256="e3b0c442" + "98fc1c14" * 7)
    (checkpoints / "checkpoint-000002.json").write_text(json.dumps(manifest))
    result: list = []
    reader = threading.Thread(
        target=lambda: result.append(CheckpointStore(checkpoints).load_latest()), daemon=True
    )
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive(), "reading a FIFO checkpoint blocked"
    [loaded] = result
    assert loaded.info.sequence == 1
    assert loaded.refused[0].kind == "not_a_file" and "FIFO" in loaded.refused[0].reason


def test_checkpoints_are_never_read_through_symlinks(tmp_path):
    run_dir = make_run_dir(tmp_path, [valid_state(), valid_state()])
    checkpoints = run_dir / "checkpoints"
    elsewhere = tmp_path / "elsewhere.pt"
    newest = checkpoints / "checkpoint-000002.pt"
    newest.rename(elsewhere)
    newest.symlink_to(elsewhere)
    loaded = CheckpointStore(checkpoints).load_latest()
    assert loaded.info.sequence == 1 and "symbolic link" in loaded.refused[0].reason
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "checkpoints").symlink_to(checkpoints)
    with pytest.raises(Exception, match="symbolic link"):
        CheckpointStore(linked / "checkpoints").load_latest()


def test_falling_back_past_a_refused_checkpoint_is_said_on_the_terminal(tmp_path, capsys):
    from syncswitch.control.plan import RunPlan
    from syncswitch.control.resume_check import ResumeCheck

    run_dir = make_run_dir(tmp_path, [valid_state(), {"servers": [], "controller": {}}])
    plan = RunPlan.resolve(make_config({**SMALL_JOB, "out": str(run_dir)}), train_samples=160)
    fits = ResumeCheck(plan, model_parameters(SMALL_JOB))
    loaded = load_resume_checkpoint(run_dir, fits)  # type: ignore[call-arg]
    assert loaded.info.sequence == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "checkpoint-000001.pt" in err[0] and "checkpoint-000002.pt: wrong contents" in err[0]


def test_out_pointing_at_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("not a directory")
    argv = ["train", "--out", str(target), "--mnist1d-samples", "200", "--no-progress"]
    assert "is a file, not a directory" in one_line_error(capsys, argv)
    assert target.read_text() == "not a directory"


def test_worker_steps_csv_is_replaced_not_written_through_a_planted_symlink(tmp_path: Path):
    from syncswitch.rundir import RunWriter

    outside = tmp_path / "victim.txt"
    outside.write_text("precious\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "worker_steps.csv").symlink_to(outside)
    writer = RunWriter(run_dir, {}, {"enabled": False})
    writer.worker_stats([{"worker": 0, "steps": 3}])
    writer.close()
    assert outside.read_text() == "precious\n"
    assert not (run_dir / "worker_steps.csv").is_symlink()
