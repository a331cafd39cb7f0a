"""Same bits: train a fixed set of small jobs, one per protocol path, and record each one's
final weights' digest, so that a refactor can show it changed no behaviour.

Run it on the code before the change and on the code after, on one machine (a digest is only
comparable on the CPU that made it), then compare:

  PYTHONPATH=/path/to/old/checkout python benchmarks/same_bits.py --out before.json
  python benchmarks/same_bits.py --out after.json --compare before.json

Every job is MNIST-1D (800 training samples), 4 workers, EMULATED 10 ms steps. On the
simulator (the default) every job is deterministic; on Ray (`--runtime ray`) only the
barrier jobs are (BSP and local rounds: their sums run in worker order), so only those run.
A row is SAME when the digest, the update count, the gradients' accounting, the switches and
(on the simulator) the SIMULATED time all match.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from harness import markdown_table, parser, read_summary, save_json

from syncswitch.config import TrainConfig
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

SLOW = {"workers": [3], "start": 0.1, "duration": 0.3, "factor": 5.0}
# name -> the job's own options; every path of the synchronizer is in one of them.
JOBS: dict[str, dict[str, Any]] = {
    "bsp": dict(schedule="bsp"),
    "bsp-asp": dict(schedule="bsp:0.25,asp"),
    "ssp": dict(schedule="bsp:0.2,ssp-2"),
    "local": dict(schedule="bsp:0.25,local-4"),
    "local-asp": dict(schedule="bsp:0.2,local-4:0.6,asp"),
    "greedy": dict(
        schedule="bsp:0.5,asp",
        online_policy="greedy",
        greedy_return=True,
        stragglers=[SLOW],
        divergence_guard=False,
    ),
    "elastic": dict(schedule="bsp:0.5,ssp-1", online_policy="elastic", stragglers=[SLOW]),
    "online": dict(schedule="bsp:online,asp"),
    "online-alone": dict(schedule="online"),
    "stale-adamw": dict(
        schedule="bsp:0.2,asp", optimizer="adamw", staleness_lr="inverse", grad_clip=1.0
    ),
    "two-servers": dict(schedule="bsp:0.3,asp", servers=2, grad_clip=1.0),
}
DETERMINISTIC_ON_RAY = ("bsp", "local")


def run_job(name: str, runtime: str, data: Any) -> list[Any]:
    """[weights digest, updates, gradients' accounting, switches, time_s] of one job."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        config = TrainConfig(
            runtime=runtime,
            workers=4,
            batch_size=16,
            epochs=3.0,
            lr=0.1,
            momentum=0.9,
            step_time_ms=10.0,
            eval_every=0.25,
            progress=False,
            seed=1,
            out=str(run_dir),
            **JOBS[name],
        )
        train(config, dataset=data, print_summary=False)
        weights = torch.load(run_dir / "final_weights.pt", weights_only=True)
        digest = hashlib.sha256()
        for key in sorted(weights):
            digest.update(key.encode())
            digest.update(weights[key].contiguous().numpy().tobytes())
        summary = read_summary(run_dir).to_plain()
        switches = [[s["from"], s["to"], s["at_samples"]] for s in summary["switches"]]
        time_s = summary["wall_time_s"] if runtime == "sim" else None  # real time varies
        return [digest.hexdigest()[:16], summary["updates"], summary["gradients"], switches, time_s]


def main() -> None:
    args = parser(__doc__, epilog=True)
    args.add_argument("--out", type=Path, required=True, help="where this run's digests go")
    args.add_argument("--runtime", choices=("sim", "ray"), default="sim")
    args.add_argument("--compare", type=Path, help="digests of another run to compare with")
    options = args.parse_args()
    data = load_dataset("mnist1d", mnist1d_samples=900).with_validation(1 / 9)
    names = [n for n in JOBS if options.runtime == "sim" or n in DETERMINISTIC_ON_RAY]
    found: dict[str, list[Any]] = {}
    for name in names:
        found[name] = run_job(name, options.runtime, data)
        print(name, found[name], flush=True)
        save_json(options.out, {"runtime": options.runtime, "jobs": found})  # as they finish
    if options.compare is None:
        return
    other = json.loads(options.compare.read_text())["jobs"]
    rows = []
    for name in names:
        same = "yes" if found[name] == other.get(name) else "NO"
        rows.append([name, found[name][0], other.get(name, ["-"])[0], same])
    table = markdown_table(["job", "digest", f"digest in {options.compare.name}", "same"], rows)
    print("\n".join(table))
    if any(row[-1] == "NO" for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
