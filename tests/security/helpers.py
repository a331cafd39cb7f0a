"""Shared by the hostile-input tests: running the CLI, and building run directories by hand.

A run directory here is made without Ray: a checkpoint's state is a real synchronizer's
snapshot (the core needs no Ray), so a resume gets as far as a real one would before it
starts Ray, which is where every refusal under test happens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from syncswitch.cli.main import main
from syncswitch.config import make_config
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.core.reliability.checkpoints import CheckpointStore
from syncswitch.core.sync.optimizer import FlatSGD, flatten_parameters
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.workloads import build_model, load_dataset

# A small job that resumes in seconds: what config.json holds for the run directories below.
SMALL_JOB = {"workers": 2, "epochs": 1.0, "mnist1d_samples": 200, "batch_size": 8}


def one_line_error(capsys: Any, argv: list[str]) -> str:
    """Run the CLI in-process; it must exit 2 with exactly one line on stderr, no traceback."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and err.startswith("syncswitch: error: ")
    return err


def run_cli(
    args: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess:
    """The real command in a fresh process (its own environment, its own Ray if any)."""
    return subprocess.run(
        [sys.executable, "-m", "syncswitch.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err[-3000:])
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err[-3000:]
    return err


def model_parameters(job: dict[str, Any]) -> int:
    config = make_config(job)
    dataset = load_dataset("mnist1d", mnist1d_samples=config.mnist1d_samples)
    return flatten_parameters(build_model(config.model_name, dataset)).numel()


def valid_state(job: dict[str, Any] = SMALL_JOB) -> dict[str, Any]:
    """A checkpoint state a resumed run of `job` accepts: what its servers and record save,
    in the unversioned layout (format 1) that checkpoints had before format_version 2."""
    plan = RunPlan.resolve(make_config(job), train_samples=160)
    sync = Synchronizer(plan.sync, FlatSGD(torch.zeros(model_parameters(job))))
    record = RunRecord().to_plain()
    return {"servers": [sync.snapshot("periodic").state.to_plain()], "controller": record}


def make_run_dir(
    root: Path,
    states: list[dict[str, Any]],
    *,
    config: Any = None,
    files: dict[str, str] | None = None,
) -> Path:
    """A run directory holding config.json, one checkpoint per state (oldest first), and
    any other files given by name."""
    run_dir = root / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    store = CheckpointStore(run_dir / "checkpoints")
    for state in states:
        store.save(state, samples=0, label="periodic")
    config_text = json.dumps(SMALL_JOB if config is None else config)
    (run_dir / "config.json").write_text(config_text)
    for name, text in (files or {}).items():
        (run_dir / name).write_text(text)
    return run_dir
