"""Run directories and checkpoints written before the house redesign (syncswitch 0.1.0, in
tests/fixtures/runs-0.1.0) still read, and resume to the same bits 0.1.0 itself reached."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from syncswitch.config import TrainConfig
from syncswitch.control.controller import CHECKPOINT_DIR
from syncswitch.core.reliability.checkpoints import CheckpointStore
from syncswitch.rundir import load_run, read_summary
from syncswitch.runtime.train import train

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs-0.1.0"
EXPECTED: dict[str, dict[str, object]] = json.loads((FIXTURES / "expected.json").read_text())


def _weights_digest(run_dir: Path) -> str:
    state = torch.load(run_dir / "final_weights.pt", weights_only=True)
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _resume(run_dir: Path, schedule: str) -> None:
    job = TrainConfig(
        runtime="sim",
        workers=4,
        epochs=3.0,
        schedule=schedule,
        checkpoint_every=0.1,
        out=str(run_dir),
        seed=0,
        progress=False,
    )
    train(job, resume=True)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_old_interrupted_run_resumes_to_the_bits_it_resumed_to_before(name, tmp_path) -> None:
    run_dir = tmp_path / name
    shutil.copytree(FIXTURES / name, run_dir)
    expected = EXPECTED[name]
    _resume(run_dir, str(expected["schedule"]))
    summary = read_summary(run_dir)
    assert summary.complete
    assert summary.final_value == expected["final_accuracy"]
    assert summary.updates == expected["updates"]
    assert _weights_digest(run_dir) == expected["weights_sha256_16"]


def test_an_old_checkpoint_in_the_unversioned_layout_resumes_to_the_same_bits(tmp_path) -> None:
    # Format 1 had no format_version and no total_samples: take 0.1.0's format-2 checkpoint
    # back to it, as an older syncswitch wrote it.
    run_dir = tmp_path / "v1"
    shutil.copytree(FIXTURES / "bsp_0_25_asp", run_dir)
    store = CheckpointStore(run_dir / CHECKPOINT_DIR)
    latest = store.load_latest()
    old = {k: v for k, v in latest.state.items() if k not in ("format_version", "total_samples")}
    store.save(old, samples=latest.info.samples, label=latest.info.label)
    _resume(run_dir, "bsp:0.25,asp")
    assert _weights_digest(run_dir) == EXPECTED["bsp_0_25_asp"]["weights_sha256_16"]


def test_an_old_complete_run_directory_reads_back() -> None:
    run = load_run(FIXTURES / "complete")
    summary = run.summary
    assert summary is not None and summary.complete and summary.final_value == 0.4965
    assert [(s.from_protocol, s.to_protocol) for s in run.switches] == [("bsp", "asp")]
    assert run.notes == []


def test_an_old_run_names_its_switch_rule_as_the_command_line_does() -> None:
    # 0.1.0 wrote the rule as staleness_noise; it reads under `--switch-rule`'s name.
    run = load_run(FIXTURES / "online")
    assert run.summary is not None and run.summary.online_timing is not None
    assert run.summary.online_timing.rule == "staleness"
    assert run.timing_signals is not None and run.timing_signals.rule == "staleness"
