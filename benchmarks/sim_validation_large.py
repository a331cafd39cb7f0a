"""Simulator validation at 16.9M parameters: does a cluster model calibrated on one Ray run
of `mlp17m` predict the others' times?

No emulation: every Ray worker computes real gradients of the 16.9M-parameter MLP
(benchmarks/wide_models.py, 67.6 MB in float32) and nothing sleeps; workers and servers
share this machine, so values pass through shared memory (the runs' actors.json says so, and
the fitted cluster model's `nodes.shared_memory` follows it). The calibration runs (marked *)
are fitted by `syncswitch calibrate`; each other job is then simulated under that model alone
and its SIMULATED wall time set against the Ray run's measured one. Held out: a switch from
BSP to ASP, other worker counts, other seeds.

    python benchmarks/sim_validation_large.py                # the table in docs/large-models.md
    python benchmarks/sim_validation_large.py --reuse-ray    # calibrate and predict again
    python benchmarks/sim_validation_large.py --link-gbps 1  # over an EMULATED 1 Gbit/s link
    python benchmarks/sim_validation_large.py --link-gbps 2.5 --server-link-gbps 2.5

With `--link-gbps G` every Ray run's messages also cross an EMULATED link of G Gbit/s per
worker each way (`syncswitch train --link-gbps`); calibration reads the link from the runs, so
the simulator times the same link (results in --out's link-<G>gbps/). With
`--server-link-gbps S` each server has an EMULATED link of its own too, which its workers'
messages take in turn, and the held-out jobs shard the model over 2 and 4 servers
(`--servers`): calibrated on one server's runs, the simulator predicts what sharding gains
(results in link-<G>gbps-servers-<S>gbps/).

Batch 32 per worker, one evaluation at the end and no checkpoint but the final one (as
benchmarks/large_model.py measures the training path). Results in --out: runs.jsonl (one line
per run as it ends), cluster.yaml, calibration.json and table.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from harness import (
    RunLog,
    Timing,
    add_links,
    add_out,
    check_timing,
    link_folder,
    markdown_table,
    parser,
    save_text,
)
from sim_validation import CALIBRATE, HELD_OUT, Case, _error, _pct

from syncswitch.calibration import calibrate, cluster_yaml
from syncswitch.config import TrainConfig
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

MODEL = "wide_models:mlp17m"
# Calibrated on a BSP and an ASP run (a fit needs 20 rounds of each protocol it sees).
CASES = (
    Case("4w bsp s0", CALIBRATE, 4, "bsp"),
    Case("4w asp s0", CALIBRATE, 4, "asp"),
    Case("4w bsp:0.5,asp s1", HELD_OUT, 4, "bsp:0.5,asp", seed=1),
    Case("2w bsp:0.5,asp s0", HELD_OUT, 2, "bsp:0.5,asp"),
    Case("3w bsp s0", HELD_OUT, 3, "bsp"),
    Case("3w asp s1", HELD_OUT, 3, "asp", seed=1),
)
# Over the servers' links: calibrated on one server, held out with the model on 2 and 4.
SHARDED_CASES = (
    Case("4w bsp s0", CALIBRATE, 4, "bsp"),
    Case("4w asp s0", CALIBRATE, 4, "asp"),
    Case("4w bsp 2 servers", HELD_OUT, 4, "bsp", servers=2),
    Case("4w bsp 4 servers", HELD_OUT, 4, "bsp", servers=4),
    Case("4w asp 2 servers s1", HELD_OUT, 4, "asp", seed=1, servers=2),
    Case("4w bsp:0.5,asp 2 servers s1", HELD_OUT, 4, "bsp:0.5,asp", seed=1, servers=2),
)
GOAL = 0.10  # the simulator's time within 10% of Ray's


def job(case: Case, out: Path, epochs: float, **changes) -> TrainConfig:
    return TrainConfig(
        **{
            "workers": case.workers,
            "schedule": case.schedule,
            "seed": case.seed,
            "servers": case.servers,
            "batch_size": 32,
            "epochs": epochs,
            "model": MODEL,
            "eval_every": 1.0,
            "checkpoint_every": 0.0,
            "divergence_guard": False,
            "progress": False,
            "out": str(out),
            **changes,
        }
    )


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument(
        "--epochs", type=float, default=0.5, help="passes over the 8,000 samples (default 0.5)"
    )
    add_out(cli, "benchmarks/results/sim-validation-mlp17m")
    cli.add_argument(
        "--reuse-ray", action="store_true", help="predict again from the Ray runs kept in --out"
    )
    add_links(cli, "the Ray runs'")  # a servers' link: held-out jobs on 2 and 4 servers
    args = cli.parse_args()
    link: dict[str, float] = {}
    if args.link_gbps:
        link = {"link_gbps": args.link_gbps, "link_latency_ms": args.link_latency_ms}
    if args.server_link_gbps:
        link["server_link_gbps"] = args.server_link_gbps
    cases = SHARDED_CASES if args.server_link_gbps else CASES
    # Ray's workers import the model's module by name: put this folder on their path.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, here)
    out = link_folder(args.out, args)
    runs = out / "runs"
    dataset = load_dataset("mnist1d", mnist1d_samples=TrainConfig().mnist1d_samples)
    log = RunLog(out / "runs.jsonl")
    if args.reuse_ray:
        # Predict again from the Ray runs an earlier invocation measured (runs.jsonl).
        kept = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
        measured = {m["case"]: m for m in kept if m["runtime"] == "ray"}
        log.clear()
        for case in cases:
            log.append(measured[case.name])
    else:
        shutil.rmtree(runs, ignore_errors=True)
        runs.mkdir(parents=True)
        log.clear()
        measured = measure_on_ray(runs, cases, dataset, args.epochs, log, link)

    basis = [Path(measured[c.name]["dir"]) for c in cases if c.role == CALIBRATE]
    model, report = calibrate(basis, model_path=MODEL)
    cluster = out / "cluster.yaml"
    cluster.write_text(cluster_yaml(model))
    replays = [r.to_plain() for r in report["replays"]]
    save_text(out / "calibration.json", json.dumps({**report, "replays": replays}, indent=1))
    print(f"calibrated: worst replay error {100 * report['worst_error']:.1f}%", flush=True)
    predicted: dict[str, float] = {}
    for case in cases:
        run_dir = runs / f"sim-{run_name(case)}"
        shutil.rmtree(run_dir, ignore_errors=True)  # predicted afresh
        config = job(case, run_dir, args.epochs, runtime="sim", cluster=str(cluster))
        summary = train(config, dataset=dataset, print_summary=False).summary
        predicted[case.name] = summary.wall_time_s
        log.append({"case": case.name, "role": case.role, "runtime": "sim",
                    "wall_time_s": summary.wall_time_s,
                    "host_time_s": summary.host_time_s})  # fmt: skip
        print(f"sim {case.name}: {summary.wall_time_s:.2f} SIMULATED s", flush=True)
    text = table(cases, args.epochs, measured, predicted, model.nodes.shared_memory, link)
    save_text(out / "table.md", text + "\n")
    print(text)


def run_name(case: Case) -> str:
    return f"{case.workers}w-{case.schedule}-s{case.seed}-{case.servers}servers"


def measure_on_ray(
    runs: Path, cases: tuple[Case, ...], dataset, epochs: float, log: RunLog, link: dict
) -> dict[str, dict]:
    """Each case trained on a local Ray (over the emulated `link`, if any): its measured wall
    seconds and load (logged as each run ends)."""
    from syncswitch.runtime.ray.connect import start_local

    start_local(max(c.workers for c in cases) + max(c.servers for c in cases) + 3)
    # A fresh Ray instance runs its first job slower: one short run, not measured, takes that.
    train(job(cases[0], runs / "warm-up", 0.05), dataset=dataset, print_summary=False)
    measured: dict[str, dict] = {}
    for case in cases:
        run_dir = runs / f"ray-{run_name(case)}"
        before = os.getloadavg()[0]
        config = job(case, run_dir, epochs, **link)
        summary = train(config, dataset=dataset, print_summary=False).summary
        load = [round(before, 2), round(os.getloadavg()[0], 2)]
        measured[case.name] = {"case": case.name, "role": case.role, "runtime": "ray",
                               "wall_time_s": summary.wall_time_s, "dir": str(run_dir),
                               "load": load}  # fmt: skip
        log.append(measured[case.name])
        print(f"ray {case.name}: {summary.wall_time_s:.2f} s", flush=True)
    import ray

    ray.shutdown()  # the simulator needs no Ray; its cores go back to the simulations
    return measured


def table(
    cases: tuple[Case, ...],
    epochs: float,
    measured: dict,
    predicted: dict,
    shared_memory: bool,
    link: dict[str, float],
) -> str:
    ray_timing = (
        f"real compute, every message over an EMULATED link of {link['link_gbps']:g} Gbit/s "
        f"and {link['link_latency_ms']:g} ms (sleeps)"
        if link.get("link_gbps")
        else "real compute, no emulation"
    )
    if link.get("server_link_gbps"):
        ray_timing += (
            f", each server's messages over an EMULATED link of {link['server_link_gbps']:g} "
            "Gbit/s of its own, in turn"
        )
    title = (
        f"mlp17m (16.9M parameters) on MNIST-1D, {epochs:g} epochs, batch 32 per worker, "
        f"{os.cpu_count()}-core machine. Ray: {ray_timing}, measured wall seconds "
        "of training. Simulator: SIMULATED seconds under the cluster model calibrated on the "
        f"runs marked * alone (values through shared memory in the model: {shared_memory}). "
        "Load: the 1-minute load average before / after each Ray run."
    )
    timings = (Timing.REAL, Timing.SIMULATED) + ((Timing.EMULATED,) if link else ())
    check_timing(title, *timings)
    rows, errors = [], []
    for case in cases:
        m, p = measured[case.name], predicted[case.name]
        error = _error(p, m["wall_time_s"])
        if case.role == HELD_OUT and error is not None:
            errors.append(abs(error))
        mark = "*" if case.role == CALIBRATE else ""
        load = " / ".join(f"{v:.1f}" for v in m["load"])
        wall = f"{m['wall_time_s']:.2f}"
        rows.append((f"{case.name}{mark}", wall, f"{p:.2f}", _pct(error), load))
    columns = ("run", "wall s Ray", "wall s sim", "error", "load")
    lines = [title, "", *markdown_table(columns, rows), ""]
    if errors:
        worst = max(errors)
        lines.append(
            f"- Held-out runs ({len(errors)}): largest wall-time error {100 * worst:.1f}% "
            f"(goal every run within {100 * GOAL:.0f}%: {'met' if worst <= GOAL else 'NOT met'})."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
