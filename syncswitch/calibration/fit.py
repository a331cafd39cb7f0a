"""`syncswitch calibrate`: a cluster model fitted to a finished Ray run's own records.

What is fitted, and from what (every figure read from the run directory):

- compute: each worker's applied step times (updates.csv). The base step time and the jitter
  are fitted robustly (median and inter-quartile range of the log step times), so straggler
  episodes do not inflate them; a worker whose median differs from the others' by more than
  10% gets a speed factor.
- the cost around a step: how much longer than its compute each protocol's steps took in
  steady state (updates.csv's times, without each phase's first fifth, which fresh processes
  run slower). ASP's extra time per step is a round trip (two
  latencies) plus one server apply; BSP's extra time per round is the wait for the slowest
  worker's step (known from the fitted compute) plus the server applying every worker's
  gradient in turn. Two protocols give two equations for the latency and the apply cost;
  the simulator then replays the run's own job and corrects both until its seconds per step
  match the measured ones (`_REFINE_ROUNDS` rounds).
- start-up: the first phase's excess over its steady pace (processes warming up).
- bandwidths keep the default (10 Gbps): on one machine a message's size barely changes its
  time, so the run cannot tell bandwidth apart from latency.

A run with one protocol only fits the latency, with the apply cost left at its default.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from syncswitch.config import TrainConfig, make_config
from syncswitch.config.limits import MAX_WORKERS
from syncswitch.core.cluster import (
    DEFAULT_LATENCY_MS,
    ClusterModel,
    ComputeModel,
    NetworkModel,
    ServerModel,
)
from syncswitch.errors import ConfigError
from syncswitch.rundir import RunData, load_run
from syncswitch.runtime.train import train
from syncswitch.workloads import ArrayDataset, build_model, load_dataset

_REFINE_ROUNDS = 4
_PROBE_GRADIENTS = 4000  # the replayed job is shortened to about this many gradients
_SPEED_FACTOR_TOLERANCE = 0.10
_WARM_UP = 0.2  # the share of each phase's updates left out of the step-cost fit
_WARM_UP_S = 5.0  # the run's first seconds, left out of the ASP cycle spread


def calibrate(run_dir: str | Path, *, refine: bool = True) -> tuple[ClusterModel, dict]:
    """A cluster model for the run in `run_dir`, and a report of what was fitted to what."""
    run = load_run(run_dir)
    _check_usable(run)
    config = run.config
    workers = _workers(run)
    step_times = run.applied_step_times
    compute = _fit_compute(step_times, workers)
    cycle_sigma = _asp_cycle_sigma(run)
    if cycle_sigma is not None:
        # An emulated step lasts exactly its drawn time, but the steps around it do not
        # (scheduling, the server's queue): the spread of ASP cycles, scaled to the step,
        # is the jitter that makes staleness vary as it did.
        compute = replace(compute, jitter_sigma=round(max(compute.jitter_sigma, cycle_sigma), 4))
    measured = _seconds_per_step(run)
    # An emulated Ray worker hands its gradient over as soon as it is computed and the server
    # applies it when the emulated step ends: the handling overlaps the step.
    overlap = bool(config.get("step_time_ms"))
    compute = replace(compute, sends_during_step=overlap)
    expected_max = _expected_slowest_s(compute, workers)
    if overlap:
        # Handling that overlaps the step shows only where the server is the bottleneck:
        # there a cycle (ASP) or a round (BSP) is every worker's gradient handled in turn.
        latency_s, apply_s = DEFAULT_LATENCY_MS / 1e3, min(measured.values()) / workers
    else:
        latency_s, apply_s = _solve(measured, compute.step_time_ms / 1e3, expected_max, workers)
    job = _job_config(run)
    # Loaded once: the parameter count and every replay of the job use it.
    dataset = load_dataset(job.dataset, job.data_dir, mnist1d_samples=job.mnist1d_samples)
    parameters = sum(p.numel() for p in build_model(job.model_name, dataset).parameters())
    servers = int(config.get("servers") or 1)
    per_server = math.ceil(parameters / servers)
    network = NetworkModel(latency_ms=latency_s * 1e3)
    server = ServerModel(message_ms=max(0.0, apply_s * 1e3 - per_server * 1e-6), ns_per_parameter=1)
    model = ClusterModel(
        name=f"calibrated from {Path(run_dir).name}",
        compute=compute,
        network=network,
        server=server,
        startup_s=round(_startup_s(run, measured), 3),
        notes={},
    )
    rounds: list[dict[str, Any]] = []
    if refine:
        model, rounds = _refine(model, job, dataset, measured)
    report = {
        "run": str(run_dir),
        "measured_s_per_step": measured,
        "expected_slowest_step_s": expected_max,
        "refine_rounds": rounds,
    }
    notes = {
        "calibrated_from": str(run_dir),
        "fitted": "compute from updates.csv step times (median, IQR; jitter from the ASP "
        "cycles' spread when steps were emulated); network latency and server message cost "
        "from each protocol's steady pace in updates.csv"
        + (
            ", refined by replaying the run on the simulator"
            if refine
            else " (not refined: --no-refine skipped replaying the run on the simulator)"
        ),
        "startup": "the first phase's excess over its steady pace",
        "kept_default": "bandwidths (10 Gbps), ns_per_parameter (1)",
    }
    return replace(model, notes=notes), report


def cluster_yaml(model: ClusterModel) -> str:
    """The model as a cluster file (what `--cluster FILE` reads)."""
    import yaml

    described = model.describe()
    return yaml.safe_dump(described, sort_keys=False, default_flow_style=None)


# -- fitting -----------------------------------------------------------------------------------


def _check_usable(run: RunData) -> None:
    if run.runtime != "ray":
        raise ConfigError(
            f"{str(run.path)!r} is a simulated run; calibrate from a run on Ray (real or "
            "emulated workers), whose times were measured"
        )
    if not run.complete:
        raise ConfigError(
            f"{str(run.path)!r} did not finish ({run.status}); calibrate from a complete run"
        )
    if not run.applied_step_times:
        raise ConfigError(f"{str(run.path)!r} has no applied gradients in updates.csv")
    _workers(run)  # checked before anything is sized by it


def _workers(run: RunData) -> int:
    """config.json's worker count, bounded before anything is allocated per worker."""
    value = run.config.get("workers")
    if type(value) is not int or not 1 <= value <= MAX_WORKERS:
        raise ConfigError(
            f"{str(run.path)!r}: config.json: workers = {str(value)[:40]!r} is not allowed; it "
            f"must be an integer in 1..{MAX_WORKERS}"
        )
    return value


def _fit_compute(step_times: dict[int, np.ndarray], workers: int) -> ComputeModel:
    logs = {w: np.log(np.maximum(t, 1e-6)) for w, t in step_times.items() if len(t)}
    medians = {w: float(np.median(v)) for w, v in logs.items()}
    centre = float(np.median(list(medians.values())))
    residuals = np.concatenate([v - medians[w] for w, v in logs.items()])
    q75, q25 = np.percentile(residuals, [75, 25])
    sigma = float((q75 - q25) / 1.349)  # a normal's IQR is 1.349 sigma
    # The median of a mean-one lognormal multiplier is exp(-sigma^2 / 2).
    base_s = math.exp(centre + sigma * sigma / 2)
    factors = [math.exp(medians.get(w, centre) - centre) for w in range(workers)]
    if all(abs(f - 1) <= _SPEED_FACTOR_TOLERANCE for f in factors):
        factors = []
    return ComputeModel(
        step_time_ms=round(base_s * 1e3, 4),
        jitter_sigma=round(sigma, 4),
        speed_factors=tuple(round(f, 3) for f in factors),
    )


def _asp_cycle_sigma(run: RunData) -> float | None:
    """Lognormal sigma of the ASP cycles (one worker's successive applied updates), robustly
    from their inter-quartile range and scaled from cycle to step; None without ASP."""
    last: dict[str, float] = {}
    cycles: list[float] = []
    steps: list[float] = []
    for protocol, worker, time_s, step_s in run.update_columns(
        ("protocol", "worker", "time_s", "step_time_s")
    ):
        if protocol != "asp":
            last.pop(worker, None)
            continue
        now = float(time_s)
        if worker in last and now > last[worker] and now >= _WARM_UP_S:
            cycles.append(now - last[worker])
            steps.append(float(step_s))
        last[worker] = now
    if len(cycles) < 100:
        return None
    logs = np.log(cycles)
    q75, q25 = np.percentile(logs, [75, 25])
    return float((q75 - q25) / 1.349 * np.mean(cycles) / np.mean(steps))


def _seconds_per_step(run: RunData) -> dict[str, float]:
    """Measured seconds per worker step (ASP) or per round (BSP), per protocol, in steady
    state: the first `_WARM_UP` of each phase's updates is left out, since fresh processes
    run slower for a while (measured on Ray here: the first ~80 BSP rounds up to twice as
    long) and that would be taken for a cost of the protocol; the start-up time
    (`_startup_s`) accounts for it instead."""
    workers = _workers(run)
    phases: list[tuple[str, list[float]]] = []
    for protocol, time_s in run.update_columns(("protocol", "time_s")):
        if not phases or phases[-1][0] != protocol:
            phases.append((protocol, []))
        phases[-1][1].append(float(time_s))
    updates: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for protocol, times in phases:
        steady = times[int(len(times) * _WARM_UP) :]
        if len(steady) > 1 and steady[-1] > steady[0]:
            updates[protocol] = updates.get(protocol, 0) + len(steady) - 1
            seconds[protocol] = seconds.get(protocol, 0.0) + steady[-1] - steady[0]
    measured = {
        protocol: seconds[protocol] * workers / updates[protocol]
        for protocol in ("bsp", "asp")
        if updates.get(protocol, 0) >= 20 * workers
    }
    if not measured:
        raise ConfigError(
            f"{str(run.path)!r} has too few BSP or ASP steps to fit (at least 20 rounds)"
        )
    return measured


def _startup_s(run: RunData, measured: dict[str, float]) -> float:
    """The run's first phase took longer than its steady pace explains: processes warming up.
    That excess (never below 0) is the cluster's start-up time."""
    workers = _workers(run)
    first: str | None = None
    count, last_s = 0, 0.0
    for protocol, time_s in run.update_columns(("protocol", "time_s")):
        if first is None:
            first = protocol
        if protocol != first:
            break
        count, last_s = count + 1, float(time_s)
    if first not in measured:
        return 0.0
    return max(0.0, last_s - count * measured[first] / workers)


def _expected_slowest_s(compute: ComputeModel, workers: int) -> float:
    rng = np.random.default_rng(0)
    sigma = compute.jitter_sigma
    factors = np.array(compute.speed_factors or [1.0] * workers)
    draws = np.exp(rng.normal(-sigma * sigma / 2, sigma, size=(20_000, workers)))
    return float((compute.step_time_ms / 1e3 * factors * draws).max(axis=1).mean())


def _solve(
    measured: dict[str, float], step_s: float, slowest_s: float, workers: int
) -> tuple[float, float]:
    """(one-way latency, server seconds per gradient) from the measured step overheads."""
    asp = measured.get("asp", 0.0) - step_s if "asp" in measured else None
    bsp = measured.get("bsp", 0.0) - slowest_s if "bsp" in measured else None
    if asp is not None and bsp is not None and workers > 1:
        apply_s = max(0.0, (bsp - asp) / (workers - 1))
        return max(0.0, (asp - apply_s) / 2), apply_s
    overhead = asp if asp is not None else bsp
    assert overhead is not None
    apply_s = ServerModel().apply_s(0)
    return max(0.0, (overhead - apply_s) / 2), apply_s


def _job_config(run: RunData) -> TrainConfig:
    """The job the run trained, as it would run again here (no output, no cluster)."""
    names = {f.name for f in fields(TrainConfig)}
    values = {k: v for k, v in run.config.items() if k in names}
    values.update(
        runtime="ray",
        cluster=None,
        out=None,
        progress=False,
        logger=None,
        tracking_uri=None,
        ray_address=None,
    )
    return make_config(values)


def _refine(
    model: ClusterModel, job: TrainConfig, dataset: ArrayDataset, measured: dict[str, float]
) -> tuple[ClusterModel, list[dict[str, Any]]]:
    """Replay the run's job on the simulator; correct latency and apply cost to match."""
    gradients = job.epochs * len(dataset.y_train) / job.batch_size
    epochs = job.epochs * min(1.0, _PROBE_GRADIENTS / gradients)
    rounds = []
    for index in range(_REFINE_ROUNDS):
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "cluster.yaml"
            path.write_text(cluster_yaml(model))
            probe = replace(
                job,
                runtime="sim",
                cluster=str(path),
                step_time_ms=0.0,
                jitter_sigma=0.0,
                speed_factors=None,
                epochs=epochs,
                eval_every=1.0,
                checkpoint_every=0.0,
                divergence_guard=False,
                out=str(Path(scratch) / "run"),
            )
            train(probe, dataset=dataset)
            simulated = _seconds_per_step(load_run(Path(scratch) / "run"))
        rounds.append({"round": index, "simulated_s_per_step": simulated})
        model = _corrected(model, measured, simulated, job.workers)
    return model, rounds


def _corrected(
    model: ClusterModel, measured: dict[str, float], simulated: dict[str, float], workers: int
) -> ClusterModel:
    """One correction of latency and server cost towards the measured seconds per step."""
    latency_s = model.network.latency_ms / 1e3
    apply_s = model.server.message_ms / 1e3  # the per-parameter part stays as it is
    d_asp = measured["asp"] - simulated.get("asp", 0.0) if "asp" in measured else None
    d_bsp = measured["bsp"] - simulated.get("bsp", 0.0) if "bsp" in measured else None
    if model.compute.sends_during_step:
        # The server's cost sets the pace where it is the bottleneck (scaled to match); the
        # latency takes up what is left of BSP's round.
        key = "asp" if "asp" in measured else "bsp"
        if simulated.get(key):
            apply_s *= measured[key] / simulated[key]
        if d_asp is not None and d_bsp is not None:
            latency_s = max(0.0, latency_s + d_bsp / 2)
    elif d_asp is not None and d_bsp is not None and workers > 1:
        d_apply = (d_bsp - d_asp) / (workers - 1)
        apply_s = max(0.0, apply_s + d_apply)
        latency_s = max(0.0, latency_s + (d_asp - d_apply) / 2)
    else:
        latency_s = max(0.0, latency_s + ((d_asp if d_asp is not None else d_bsp) or 0) / 2)
    return replace(
        model,
        network=replace(model.network, latency_ms=round(latency_s * 1e3, 5)),
        server=replace(model.server, message_ms=round(max(0.0, apply_s) * 1e3, 5)),
    )
