"""Every label true: the MLflow timing tag and the end-of-run hint (issue 25)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syncswitch.loggers.mlflow import timing_kind, viewing_hint


def test_the_timing_tag_names_simulated_emulated_and_real_runs() -> None:
    assert timing_kind({"runtime": "sim", "emulation": {"enabled": True}}) == "simulated"
    assert timing_kind({"runtime": "ray", "emulation": {"enabled": True}}) == "emulated"
    assert timing_kind({"runtime": "ray", "emulation": {"enabled": False}}) == "real"
    assert timing_kind({}) == "real"


def test_the_hint_is_a_command_the_mlflow_extra_can_run(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    beside = Path(sys.executable).parent / "mlflow"  # the venv's, when not on PATH
    mlflow = str(beside) if beside.exists() else shutil.which("mlflow")
    assert mlflow, "the [mlflow] extra installs the mlflow command"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    hint = viewing_hint(uri)
    assert hint.startswith(f"MLFLOW_TRACKING_URI={uri} mlflow ")
    command = hint.split("   (")[0].split()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    done = subprocess.run(
        [mlflow, *command[2:]], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
