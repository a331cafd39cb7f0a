"""SIGTERM and SIGHUP stop a simulated run as Ctrl-C does: one line, a summary that says
failed and why, and a run that `--resume` continues."""

import json
import signal
import subprocess
import sys
import time

import pytest

from syncswitch.cli.main import main


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_a_simulated_run_in_one_line_and_it_resumes(tmp_path, number):
    run_dir = tmp_path / "run"
    # 200 epochs train for about 7 s here after the first checkpoint: a test process starved
    # on a loaded machine must not see the run end before its signal (30 epochs took 1 s, and
    # a CI run once finished first, exiting 0).
    argv = [
        "train", "--runtime", "sim", "--workers", "4", "--epochs", "200", "--schedule", "bsp",
        "--mnist1d-samples", "1000", "--checkpoint-every", "0.01", "--no-progress",
        "--out", str(run_dir),
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncswitch.cli.main", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    # A checkpoint is complete once its manifest is written (after the .pt): a signal before
    # that would leave nothing to resume from.
    while not list((run_dir / "checkpoints").glob("*.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        time.sleep(0.05)
    proc.send_signal(number)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, err[-2000:]
    assert f"{signal.Signals(number).name} received" in lines[0]
    status = json.loads((run_dir / "summary.json").read_text())["status"]
    assert status.startswith("failed: RunStopped")
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "complete"
