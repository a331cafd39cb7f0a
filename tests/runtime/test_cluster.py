"""Real clusters on this machine: a three-node one (ray.cluster_utils) with a node removed
mid-run, and a head started by `ray start` that a job joins by --ray-address.

Each cluster lives in processes of its own, with its own token, so the session's local Ray
(tests/conftest.py) is neither joined nor disturbed; each test stops only what it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
HARNESS_TIMEOUT_S = 900


def accounted(summary: dict) -> None:
    acct = summary["gradients"]
    assert acct["unaccounted"] == 0
    assert acct["sent"] == acct["applied"] + sum(acct["dropped"].values())


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the session's Ray settings (its token, its mode)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("cluster")
    done = subprocess.run(
        [sys.executable, "-m", "tests.runtime.cluster_harness", str(out)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=HARNESS_TIMEOUT_S,
    )
    logs = "".join(p.read_text()[-3000:] for p in sorted(out.glob("*.log")))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs
    report = json.loads((out / "harness.json").read_text())
    print("cluster harness:", json.dumps(report))  # the durations, for the CI log
    return out, report


def test_a_spread_job_runs_on_several_nodes_and_each_node_gets_the_data_once(three_nodes):
    out, report = three_nodes
    assert report["spread_rc"] == 0, (out / "spread.log").read_text()[-3000:]
    summary = json.loads((out / "spread" / "summary.json").read_text())
    actors = json.loads((out / "spread" / "actors.json").read_text())
    assert summary["status"] == "complete"
    accounted(summary)
    placed = summary["placement"]
    assert placed["placement"] == "spread" and len(placed["node_ids"]) >= 2
    assert placed["node_ids"] == actors["node_ids"]
    roles = {name: where["node_id"] for name, where in actors["actors"].items()}
    assert {"server 0", "server 1", "evaluator", "worker 0", "worker 1", "worker 2"} <= set(roles)
    assert {roles[f"worker {w}"] for w in range(3)} | {roles["server 0"]} <= set(placed["node_ids"])
    # The model's two shards are served from two nodes (the run completed across them).
    assert roles["server 0"] != roles["server 1"]
    # One object-store copy of the dataset on every node that ran a worker (Ray keeps at
    # most one per node), not one per worker.
    worker_nodes = {roles[f"worker {w}"] for w in range(3)}
    assert worker_nodes <= set(actors["dataset_copies_on_nodes"])


def test_losing_the_servers_node_mid_run_loses_nothing_unaccounted(three_nodes):
    out, report = three_nodes
    assert report["node_loss_rc"] == 0, (out / "node_loss.log").read_text()[-3000:]
    removed = report["removed"]
    assert "error" not in removed, removed
    run_dir = out / "node_loss"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["final_value"] is not None
    assert summary["samples"] >= 12 * 288  # 320 training samples, 32 carved for validation
    accounted(summary)
    failures = summary["reliability"]["failures"]
    [server] = [f for f in failures if f["kind"] == "server"]
    assert server["recovery"].startswith("restored from checkpoint-")
    # Every worker that was on the lost node died and was restarted.
    lost_workers = {int(a.split()[1]) for a in removed["actors"] if a.startswith("worker")}
    restarted = {f["worker"] for f in failures if f["kind"] == "worker"}
    assert lost_workers <= restarted
    # Everything runs on the node left now; both nodes are on record.
    actors = json.loads((run_dir / "actors.json").read_text())
    [left] = report["nodes_left"]
    assert {a["node_id"] for name, a in actors["actors"].items() if name != "driver"} == {left}
    assert set(summary["placement"]["nodes_seen"]) == {left, removed["node_id"]}


# -- a head started by `ray start`, joined by address ------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_reachable(port: int, head: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert head.poll() is None, "ray start exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"no Ray head on port {port} after {timeout_s:g} s")


def syncswitch_train(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "syncswitch.cli.main", "train", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def alive_nodes(address: str, env: dict[str, str]) -> int:
    """Joins the cluster from a fresh process as the project does, and counts its nodes."""
    code = (
        "from syncswitch.runtime.ray.connect import cluster_address, cluster_view, join_cluster\n"
        f"join_cluster(cluster_address({address!r}))\n"
        "print(cluster_view('it').nodes)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


def test_a_job_joins_a_running_cluster_by_address_and_leaves_it_running(tmp_path):
    port = free_port()
    address = f"127.0.0.1:{port}"
    # The cluster has token authentication with a token of its own; the job gets it the way
    # a user would, in its environment (docs/security.md, "Running on a shared cluster").
    env = clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    ray_start = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block"]
    ray_start += [f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=5"]
    ray_start += ["--include-dashboard=false", "--disable-usage-stats"]
    head = subprocess.Popen(
        ray_start,
        # Ray's switch that keeps a node on loopback (off by default on Linux).
        env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
        stdout=(tmp_path / "head.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped below, and only it
    )
    try:
        wait_reachable(port, head)
        job = ["--ray-address", address, "--workers", "2", "--batch-size", "8", "--epochs", "1"]
        job += ["--mnist1d-samples", "400", "--no-progress", "--json"]
        done = syncswitch_train(*job, "--out", str(tmp_path / "run"), env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["status"] == "complete"
        accounted(summary)
        assert json.loads(done.stdout)["status"] == "complete"
        # The job left; the cluster did not: the head is up and still has its node.
        assert head.poll() is None
        assert alive_nodes(address, env) == 1
        # More GPUs than the cluster has: one line, before any actor starts.
        refused = syncswitch_train(
            *job, "--gpus-per-worker", "0.5", "--out", str(tmp_path / "gpu"), env=env
        )
        assert refused.returncode == 2
        [line] = refused.stderr.strip().splitlines()
        assert "gpus_per_worker = 0.5" in line and f"the Ray cluster at {address}" in line
        assert not (tmp_path / "gpu" / "actors.json").exists()
        assert head.poll() is None
    finally:
        head.send_signal(signal.SIGTERM)  # --block: ray start stops what it started
        try:
            head.wait(timeout=60)
        finally:
            # Anything left in its process group (its own session, so only what it started).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(head.pid, signal.SIGKILL)
