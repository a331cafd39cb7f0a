"""Failures on a real local Ray: dead and hung workers, a dead server, a killed driver, bad
gradients and divergence. Processes are killed for real (SIGKILL by the pids in actors.json)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from syncswitch.core.reliability.checkpoints import CheckpointStore
from syncswitch.errors import TrainingStalled
from tests.runtime.jobs import read_csv, run

pytestmark = pytest.mark.ray

# 320 training samples, 4 workers x 8: a BSP update is 32 samples, 10 per epoch.
JOB = dict(workers=4, batch_size=8, step_time_ms=10.0, eval_every=0.25)


def accounted(summary: dict) -> None:
    acct = summary["gradients"]
    assert acct["unaccounted"] == 0
    assert acct["sent"] == acct["applied"] + sum(acct["dropped"].values())


def failures(summary: dict, kind: str) -> list[dict]:
    return [f for f in summary["reliability"]["failures"] if f["kind"] == kind]


def test_dead_and_bad_workers_never_stop_the_run(ray_session, small_mnist, tmp_path):
    faults = [
        {"kind": "crash", "worker": 1, "at": 0.3},  # mid-BSP: the process exits
        {"kind": "nan_gradient", "worker": 2, "at": 0.5},
        {"kind": "wrong_shape", "worker": 3, "at": 0.7},  # mid-ASP
    ]
    result = run(tmp_path, small_mnist, schedule="bsp:0.6,asp", epochs=6.0, faults=faults, **JOB)
    summary = result.summary
    assert summary["status"] == "complete" and summary["final_value"] is not None
    [crash] = failures(summary, "worker")
    assert crash["worker"] == 1 and 0.3 <= crash["at_fraction"] < 0.6
    quarantined = {
        d["worker"]: d["reason"]
        for d in summary["reliability"]["decisions"]
        if d["action"] == "quarantine"
    }
    assert "non_finite" in quarantined[2] and "shape_mismatch" in quarantined[3]
    dropped = summary["gradients"]["dropped"]
    assert dropped["non_finite"] == 3 and dropped["shape_mismatch"] == 3
    assert dropped["quarantined"] > 0
    accounted(summary)
    assert np.isfinite(result.final_weights).all()
    # The restarted incarnation rejoined and finished its run (short runs may end before it
    # is up again, so whether it still applied gradients depends on timing).
    steps = read_csv(result.run_dir, "worker_steps.csv")
    assert sorted(r["worker"] for r in steps) == ["0", "1", "2", "3"]


def test_a_run_with_every_worker_quarantined_stops_with_its_results(
    ray_session, small_mnist, tmp_path
):
    faults = [{"kind": "nan_gradient", "worker": w, "at": 0.3} for w in range(4)]
    with pytest.raises(TrainingStalled, match=r"every worker \(4\) is quarantined"):
        run(tmp_path, small_mnist, schedule="asp", epochs=6.0, faults=faults, **JOB)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"].startswith("failed: TrainingStalled")
    assert summary["samples"] < 0.5 * 6 * 320  # stopped soon after the faults began at 0.3
    accounted(summary)


def test_a_hung_worker_is_killed_restarted_and_bsp_goes_on(ray_session, small_mnist, tmp_path):
    faults = [{"kind": "hang", "worker": 0, "at": 0.2}]
    result = run(
        tmp_path,
        small_mnist,
        schedule="bsp",
        epochs=4.0,
        faults=faults,
        worker_timeout_s=3.0,
        **JOB,
    )
    summary = result.summary
    [hung] = failures(summary, "worker")
    assert hung["worker"] == 0 and hung["reason"].startswith("hung")
    accounted(summary)
    assert summary["status"] == "complete"


def _kill_when(run_dir: Path, total: int, fraction: float, who: str) -> dict:
    """Wait until the run has applied `fraction` of its samples, then SIGKILL `who`."""
    while True:
        time.sleep(0.05)
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
            pids = json.loads((run_dir / "actors.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if summary.get("samples", 0) >= fraction * total:
            os.kill(pids[who][0], signal.SIGKILL)
            return summary


def test_a_killed_server_is_restored_from_the_last_checkpoint(ray_session, small_mnist, tmp_path):
    epochs, total = 12.0, 12 * 320
    run_dir = tmp_path / "run"
    killer = threading.Thread(target=_kill_when, args=(run_dir, total, 0.5, "servers"))
    killer.start()
    job = {**JOB, "step_time_ms": 20.0}  # BSP rounds slow enough to kill the server mid-run
    result = run(tmp_path, small_mnist, schedule="bsp", epochs=epochs, **job)
    killer.join()
    summary = result.summary
    [server] = failures(summary, "server")
    interval = 0.05 * total  # checkpoint_every's default
    # Lost: what was applied after the last checkpoint on disk. Snapshots reach the disk at
    # the coordinator's next poll, so up to one interval plus a poll's worth of updates.
    assert 0 <= server["samples_lost"] <= 2 * interval
    assert server["checkpoint_samples"] >= 0.4 * total
    assert summary["status"] == "complete" and summary["samples"] >= total
    accounted(summary)


def _cli(*args: str, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "syncswitch.cli.main", "train", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the driver and its local Ray
        )


def test_killed_driver_resumes_past_a_damaged_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    args = ["--workers", "4", "--batch-size", "8", "--epochs", "12", "--mnist1d-samples", "400"]
    args += ["--schedule", "bsp", "--step-time-ms", "20", "--eval-every", "0.25"]
    driver = _cli(*args, "--no-progress", "--out", str(run_dir), log=tmp_path / "log")
    total = 12 * 288  # 320 training samples, 32 of them carved for validation
    while driver.poll() is None:
        time.sleep(0.1)
        try:
            samples = json.loads((run_dir / "summary.json").read_text()).get("samples", 0)
        except (OSError, json.JSONDecodeError):
            continue
        if samples >= 0.5 * total:
            break
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    checkpoints = sorted((run_dir / "checkpoints").glob("checkpoint-*.pt"))
    assert len(checkpoints) == 2  # the newest and the one before it
    newest = checkpoints[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # truncated, as by a full disk
    loaded = CheckpointStore(run_dir / "checkpoints").load_latest()
    assert loaded.info.path == checkpoints[0]
    initial = loaded.state["controller"]["guard_initial_level"]
    resumed = _cli("--resume", str(run_dir), "--no-progress", log=tmp_path / "log")
    assert resumed.wait(timeout=300) == 0, (tmp_path / "log").read_text()[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["final_value"] is not None
    [resume] = failures(summary, "resumed")
    assert resume["checkpoint"]["file"] == checkpoints[0].name
    assert newest.name in resume["refused_checkpoints"][0]
    accounted(summary)
    # The guard judges the resumed losses against the untrained level measured before the
    # kill (ln 10 = 2.3 nats for 10 classes), not against the already-trained resumed ones.
    assert 1.5 < initial < 3.0
    assert summary["reliability"]["guard_initial_loss"] == initial
    metrics = read_csv(run_dir, "metrics.csv")
    fractions = [float(m["fraction"]) for m in metrics]
    assert fractions == sorted(set(fractions)) and fractions[-1] == 1.0  # no row twice
    updates = [int(r["samples"]) for r in read_csv(run_dir, "updates.csv")]
    assert updates == sorted(updates) and updates[-1] >= total


def test_resume_refuses_a_run_with_no_usable_checkpoint(tmp_path, capsys):
    from syncswitch.cli.main import main

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    # A damaged checkpoint is refused; a run with none at all starts over (test_user_code_...).
    (run_dir / "checkpoints" / "checkpoint-000001.json").write_text("garbage")
    (run_dir / "config.json").write_text(json.dumps({"workers": 2}))
    assert main(["train", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot resume" in err and "no valid checkpoint" in err and len(err.splitlines()) == 1
    assert main(["train", "--resume", str(run_dir), "--workers", "3"]) == 2
    assert "drop --workers" in capsys.readouterr().err


def test_divergence_is_rolled_back_and_the_run_continues_under_bsp(ray_session, tmp_path):
    # BSP learns; ASP with BSP's momentum kept then blows up, and the guard rolls it back.
    from syncswitch.workloads import load_dataset

    # 3,200 training samples once 400 of 3,600 are carved for validation here.
    dataset = load_dataset("mnist1d", mnist1d_samples=4500).with_validation(1 / 9)
    result = run(
        tmp_path,
        dataset,
        workers=8,
        batch_size=32,
        schedule="bsp:0.5,asp",
        momentum_at_switch="keep",
        epochs=10.0,
        step_time_ms=10.0,
        eval_every=0.1,
        mnist1d_samples=4000,
    )
    summary = result.summary
    rollbacks = [d for d in summary["reliability"]["decisions"] if d["action"] == "rollback"]
    assert rollbacks and summary["reliability"]["rollbacks"] == len(rollbacks)
    assert rollbacks[0]["progress"] > 0.5  # after the switch to ASP
    assert summary["reliability"]["pinned_protocol"] == "bsp"
    assert summary["reliability"]["lr_scale"] == pytest.approx(0.5 ** len(rollbacks))
    # The last good checkpoint may have been taken in ASP (the run switches back to BSP, a
    # divergence switch) or before the switch (it is in BSP already); either way the
    # run ends in BSP.
    last_switch = summary["switches"][-1]
    if last_switch["to"] == "asp":
        assert last_switch["at_fraction"] < rollbacks[0]["progress"]
    else:
        assert last_switch["to"] == "bsp" and "divergence" in last_switch["reason"]
    updates = read_csv(result.run_dir, "updates.csv")
    assert {r["protocol"] for r in updates[-len(updates) // 4 :]} == {"bsp"}
    accounted(summary)
    assert torch.isfinite(torch.tensor(result.final_weights)).all()
    assert summary["final_value"] > 0.4  # chance is 0.1, where the unguarded run ends
