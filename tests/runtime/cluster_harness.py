"""A three-node Ray cluster on this machine, and `syncswitch train` jobs on it.

Run as a script by tests/runtime/test_cluster.py, in its own process: the test session's
local Ray lives in the pytest process, and a cluster started there would share its globals
(the connected driver, RAY_AUTH_* in the environment). Everything it starts it stops.

The cluster is locked down like the project's local instance (docs/security.md): every node
binds 127.0.0.1, and token authentication is on with a fresh token that only this process
tree knows. The head has no CPUs, so the job's actors all run on the two other nodes and
either of them can be removed (the driver stays connected through the head).

    python -m tests.runtime.cluster_harness OUT_DIR

writes OUT_DIR/harness.json: what each job returned, and which node was removed when.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

# Before Ray reads them: a cluster of our own, whatever the caller's environment says.
for name in [n for n in os.environ if n.startswith("RAY_")]:
    del os.environ[name]
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

from ray.cluster_utils import Cluster  # noqa: E402

NODE_CPUS = 6  # one node must hold a whole job (3 workers, up to 2 servers, the evaluator)
JOB = [
    "--workers", "3", "--batch-size", "8", "--mnist1d-samples", "400",
    "--eval-every", "0.25", "--no-progress", "--placement", "spread",
]  # fmt: skip
# Lost nodes are noticed within about a second instead of Ray's default tens of seconds.
FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}
JOB_TIMEOUT_S = 420.0


def train(address: str, out: Path, *args: str) -> subprocess.Popen:
    log = (out.parent / f"{out.name}.log").open("wb")
    command = [sys.executable, "-m", "syncswitch.cli.main", "train", "--ray-address", address]
    return subprocess.Popen(
        [*command, *JOB, *args, "--out", str(out)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def remove_server_node(
    cluster: Cluster, job: subprocess.Popen, run_dir: Path, total: int, fraction: float
) -> dict:
    """Once the run has applied `fraction` of its samples, kill the node of server 0 (with
    everything else on it) without a graceful shutdown, as when a machine fails."""
    while True:
        time.sleep(0.05)
        if job.poll() is not None:
            return {"error": f"the job ended (exit {job.returncode}) before the removal"}
        summary = read_json(run_dir / "summary.json") or {}
        actors = read_json(run_dir / "actors.json") or {}
        if summary.get("samples", 0) < fraction * total or "server 0" not in actors.get(
            "actors", {}
        ):
            continue
        node_id = actors["actors"]["server 0"]["node_id"]
        [node] = [n for n in cluster.worker_nodes if n.node_id == node_id]
        lost = sorted(name for name, a in actors["actors"].items() if a["node_id"] == node_id)
        cluster.remove_node(node, allow_graceful=False)
        return {"node_id": node_id, "at_samples": summary["samples"], "actors": lost}


def main(out: Path) -> None:
    report: dict = {}
    started = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "_system_config": FAST_FAILURE_DETECTION,
        },
    )
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=NODE_CPUS, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        report["cluster_up_s"] = round(time.monotonic() - started, 1)
        address = cluster.address

        begun = time.monotonic()
        # The model sharded over two servers, which spread places on the two nodes.
        spread = train(
            address, out / "spread", "--epochs", "1", "--schedule", "bsp:0.5,asp", "--servers", "2"
        )
        report["spread_rc"] = spread.wait(timeout=JOB_TIMEOUT_S)
        report["spread_s"] = round(time.monotonic() - begun, 1)

        begun = time.monotonic()
        # Long enough (about 10 s of training here) that the node goes at 30%, mid-run.
        epochs, total = 12, 12 * 288  # 320 training samples, 32 carved for validation
        lossy = train(
            address,
            out / "node_loss",
            *("--epochs", str(epochs), "--schedule", "bsp:0.5,asp", "--step-time-ms", "20"),
        )
        report["removed"] = remove_server_node(cluster, lossy, out / "node_loss", total, 0.3)
        report["node_loss_rc"] = lossy.wait(timeout=JOB_TIMEOUT_S)
        report["node_loss_s"] = round(time.monotonic() - begun, 1)
        report["nodes_left"] = [n.node_id for n in cluster.worker_nodes]
    finally:
        cluster.shutdown()
        report["total_s"] = round(time.monotonic() - started, 1)
        (out / "harness.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
