"""`syncswitch calibrate`: a cluster model fitted to finished Ray runs' own records.

What is fitted, and from what (every figure read from the run directories or timed here):

- compute: each worker's applied step times (updates.csv). The base step time and the jitter
  are fitted robustly (median and inter-quartile range of the log step times), so straggler
  episodes do not inflate them; a worker whose median differs from the others' by more than
  10% gets a speed factor. An emulated run's ASP cycles set the jitter (their spread). Real
  gradients on the CPU: the base step time is the workers' recorded compute CPU, the cores'
  queue (nodes) adding what sharing them costs.
- nodes: where the run's actors ran (summary.json's placement): on one node, every worker,
  the servers, the evaluator and the driver share its cores (this machine's, or `cores`).
- host CPU per role: the workers' compute CPU per step from their own records
  (worker_steps.csv); the server's CPU per gradient and the evaluator's per evaluation timed
  here on the job's own model and server code.
- what is left, fitted by replaying the runs on the simulator: the workers' framework and
  data-plane CPU per step (it shows as contention: BSP rounds, many workers) and the
  network latency (the rest of each step), corrected together until the replayed seconds
  per step of every run and protocol match the measured ones (Gauss-Newton, least squares).
- start-up: the first phase's excess over its steady pace (processes warming up).
- bandwidths keep the default (10 Gbps): on one machine a message's size barely changes its
  time, so the runs cannot tell bandwidth apart from latency.

The model is then replayed on each run's whole job, and the wall time and each protocol's
seconds per step compared (`Replay`); the CLI refuses to write a model that misses its own
runs by more than `MAX_REPLAY_ERROR`.

Modules: `runs` (what is read of each run and fitted directly from it), `replay` (a run's job
replayed on the simulator, `Replay`), `refine` (the unknowns fitted by replaying);
`Replay` and `cluster_yaml` are importable from here too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from syncswitch.calibration.host import recorded_compute_ms, timed_costs
from syncswitch.calibration.refine import START, refine_unknowns
from syncswitch.calibration.replay import Replay, cluster_yaml, replay_whole
from syncswitch.calibration.runs import (
    asp_cycle_sigma,
    computed_on_cpu,
    emulated_link,
    fit_compute,
    load_runs,
    node_shape,
    startup_s,
)
from syncswitch.core.cluster.emulation import link_network
from syncswitch.core.cluster.model import (
    MAX_NAME_CHARS,
    ClusterModel,
    HostCpuModel,
    NetworkModel,
    ServerModel,
)
from syncswitch.errors import ConfigError

__all__ = ["MAX_REPLAY_ERROR", "Replay", "calibrate", "cluster_yaml"]

MAX_REPLAY_ERROR = 0.05  # a model whose replay misses its own runs by more is refused


def calibrate(
    run_dirs: str | Path | Sequence[str | Path],
    *,
    refine: bool = True,
    cores: int | None = None,
    model_path: str | None = None,
) -> tuple[ClusterModel, dict]:
    """A cluster model for the runs in `run_dirs`, and a report of what was fitted to what
    and how well its replay matches each run. `cores`: each node's cores (default: this
    machine's, for runs that ran on one node). `model_path`: the import path of the runs' own
    model, as the caller names it; a run directory's config.json never chooses code to
    import, so a run that names one is refused without it (docs/security.md)."""
    paths = [Path(run_dirs)] if isinstance(run_dirs, str | Path) else [Path(p) for p in run_dirs]
    if not paths:
        raise ConfigError("calibrate needs at least one run directory")
    runs = load_runs(paths, model_path)
    first = runs[0]
    compute = fit_compute(first.run.applied_step_times, first.workers)
    sigmas = [s for s in (asp_cycle_sigma(r.run) for r in runs) if s is not None]
    if sigmas:
        # An emulated step lasts exactly its drawn time, but the steps around it do not
        # (scheduling, the server's queue): the spread of ASP cycles, scaled to the step,
        # is the jitter that makes staleness vary as it did. The least spread of the runs:
        # where cores are short, contention (modelled on its own) spreads the cycles more.
        compute = replace(compute, jitter_sigma=round(max(compute.jitter_sigma, min(sigmas)), 4))
    # An emulated Ray worker hands its gradient over as soon as it is computed; the server
    # holds it until the emulated step ends and applies it then.
    overlap = all(bool(r.run.config.get("step_time_ms")) for r in runs)
    compute = replace(compute, sends_during_step=overlap)
    nodes = node_shape(runs, cores)
    network = NetworkModel(latency_ms=START[2])
    link = emulated_link(runs)
    if link is not None:
        # The runs' values crossed emulated links (--link-gbps, --server-link-gbps): the
        # network is those links, and what latency the local transport adds is fitted on top.
        gbps, latency_ms, server_gbps = link
        network = link_network(gbps, latency_ms + START[2], server_gbps)
        nodes = replace(nodes, shared_memory=False)
    recorded = [m for m in (recorded_compute_ms(r.run) for r in runs) if m is not None]
    if recorded and computed_on_cpu(runs):
        # A CPU "device": a step is its compute CPU, and its stretch when the workers
        # outnumber the cores is the cores' queue (nodes.cores). A device time fitted from the
        # stretched steps would count that twice and keep it at other worker counts.
        compute = replace(compute, step_time_ms=round(statistics.mean(recorded), 4))
    server_ms, evaluator_ms = timed_costs(first.job, first.dataset, first.build_model)
    parameters = sum(p.numel() for p in first.build_model().parameters())
    per_server = math.ceil(parameters / first.job.servers)
    model = ClusterModel(
        name=calibrated_name(paths),
        compute=compute,
        network=network,
        server=ServerModel(
            message_ms=round(max(0.0, server_ms - per_server * 1e-6), 5),
            ns_per_parameter=1,
            reply_ms=START[1],
            applies_after_step=overlap,
        ),
        nodes=nodes,
        host_cpu=HostCpuModel(
            worker_ms=START[0],
            compute_ms=round(statistics.mean(recorded), 4) if recorded else 0.0,
            evaluator_ms=round(evaluator_ms, 3),
            driver_ms=START[3],
        ),
        startup_s=round(statistics.median(startup_s(r.run, r.measured) for r in runs), 3),
    )
    rounds: list[dict[str, Any]] = []
    if refine:
        model, rounds = refine_unknowns(model, runs)
    replays = [replay_whole(model, r) for r in runs]
    report = {
        "runs": [str(p) for p in paths],
        "measured_s_per_step": first.measured,
        "refine_rounds": rounds,
        "replays": replays,
        "worst_error": max(abs(r.worst()[1]) for r in replays),
        "host_cpu_ms": {
            "worker_compute_recorded": model.host_cpu.compute_ms if recorded else None,
            "server_timed": round(server_ms, 4),
            "evaluator_timed": round(evaluator_ms, 3),
        },
    }
    notes = {
        "calibrated_from": ", ".join(str(p) for p in paths),
        "fitted": "compute from updates.csv step times (median, IQR; jitter from the ASP "
        "cycles' spread when steps were emulated); nodes from the runs' placement; host CPU: "
        "worker compute from worker_steps.csv, server and evaluator timed on this machine; "
        "what is left (worker framework CPU per step, server CPU per reply, driver CPU per "
        "gradient, network latency)"
        + (
            " fitted by replaying the runs on the simulator"
            if refine
            else " left at a guess (not refined: --no-refine skipped replaying the runs)"
        ),
        "replay_error": ", ".join(
            f"{r.run}: {key} {100 * err:+.1f}%" for r in replays for key, err in r.errors().items()
        ),
        "startup": "the first phase's excess over its steady pace (median over the runs)",
        "kept_default": "bandwidths (10 Gbps), ns_per_parameter (1)",
    }
    if link is not None:
        notes["network"] = (
            "the runs' emulated links (--link-gbps, --server-link-gbps); a side without one "
            "unlimited, as emulated"
        )
        notes["kept_default"] = "ns_per_parameter (1)"
    return replace(model, notes=notes), report


def calibrated_name(paths: Sequence[Path]) -> str:
    """The fitted model's name: the runs it was fitted to, as many as fit in the name a
    cluster file may have (MAX_NAME_CHARS), then how many more; never one it would refuse."""
    head, names = "calibrated from ", [p.name for p in paths]
    shown: list[str] = []
    for index, name in enumerate(names):
        rest = len(names) - index - 1
        candidate = head + ", ".join([*shown, name]) + (f" and {rest} more" if rest else "")
        if len(candidate) > MAX_NAME_CHARS:
            break
        shown.append(name)
    if not shown:
        return f"{head}{len(names)} run{'s' if len(names) != 1 else ''}"
    rest = len(names) - len(shown)
    return head + ", ".join(shown) + (f" and {rest} more" if rest else "")
