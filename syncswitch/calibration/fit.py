"""`syncswitch calibrate`: a cluster model fitted to finished Ray runs' own records.

What is fitted, and from what (every figure read from the run directories or timed here):

- compute: each worker's applied step times (updates.csv). The base step time and the jitter
  are fitted robustly (median and inter-quartile range of the log step times), so straggler
  episodes do not inflate them; a worker whose median differs from the others' by more than
  10% gets a speed factor. An emulated run's ASP cycles set the jitter (their spread).
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
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from syncswitch.calibration.host import recorded_compute_ms, timed_costs
from syncswitch.config import TrainConfig, make_config
from syncswitch.config.limits import MAX_WORKERS
from syncswitch.core.cluster.model import (
    ClusterModel,
    ComputeModel,
    HostCpuModel,
    NetworkModel,
    NodeModel,
    ServerModel,
)
from syncswitch.errors import ConfigError
from syncswitch.rundir import RunData, load_run
from syncswitch.runtime.train import train
from syncswitch.workloads import ArrayDataset, build_model, load_dataset

MAX_REPLAY_ERROR = 0.05  # a model whose replay misses its own runs by more is refused
_REFINE_ROUNDS = 8
_PROBE_GRADIENTS = 3000  # a replay during the fit is shortened to about this many gradients
_SPEED_FACTOR_TOLERANCE = 0.10
_WARM_UP = 0.2  # the share of each phase's updates left out of the step-cost fit
_WARM_UP_S = 5.0  # the run's first seconds, left out of the ASP cycle spread
# The unknowns the replays fit, where the fit starts, and their finite-difference steps: a
# worker's framework CPU per step, the server's CPU per reply, the one-way latency, and the
# driver's CPU per gradient (ms).
_UNKNOWNS = ("worker_ms", "reply_ms", "latency_ms", "driver_ms")
_START = (0.3, 0.5, 0.1, 0.3)
_STEP = (0.25, 0.25, 0.1, 0.25)


@dataclass(frozen=True)
class CalibrationRun:
    """One run the model is fitted to, as the fit reads it."""

    path: Path
    run: RunData
    job: TrainConfig
    dataset: ArrayDataset
    workers: int
    measured: dict[str, float]  # steady seconds per step (ASP) or round (BSP), per protocol
    wall_s: float


@dataclass(frozen=True)
class Replay:
    """A run's measured figures against the model's replay of its whole job."""

    run: str
    workers: int
    measured: dict[str, float]  # "wall" (s) and each protocol's seconds per step
    simulated: dict[str, float]

    def errors(self) -> dict[str, float]:
        return {
            key: self.simulated[key] / value - 1
            for key, value in self.measured.items()
            if value > 0 and key in self.simulated
        }

    def worst(self) -> tuple[str, float]:
        """The figure furthest off, and its relative error (inf: the replay lacks it)."""
        missing = [key for key in self.measured if key not in self.simulated]
        if missing:
            return missing[0], math.inf
        errors = self.errors()
        key = max(errors, key=lambda k: abs(errors[k]))
        return key, errors[key]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "workers": self.workers,
            "measured": self.measured,
            "simulated": self.simulated,
        }


def calibrate(
    run_dirs: str | Path | Sequence[str | Path],
    *,
    refine: bool = True,
    cores: int | None = None,
) -> tuple[ClusterModel, dict]:
    """A cluster model for the runs in `run_dirs`, and a report of what was fitted to what
    and how well its replay matches each run. `cores`: each node's cores (default: this
    machine's, for runs that ran on one node)."""
    paths = [Path(run_dirs)] if isinstance(run_dirs, str | Path) else [Path(p) for p in run_dirs]
    if not paths:
        raise ConfigError("calibrate needs at least one run directory")
    runs = _load_runs(paths)
    first = runs[0]
    compute = _fit_compute(first.run.applied_step_times, first.workers)
    sigmas = [s for s in (_asp_cycle_sigma(r.run) for r in runs) if s is not None]
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
    nodes = _node_shape(runs, cores)
    recorded = [m for m in (recorded_compute_ms(r.run) for r in runs) if m is not None]
    server_ms, evaluator_ms = timed_costs(first.job, first.dataset)
    parameters = sum(
        p.numel() for p in build_model(first.job.model_name, first.dataset).parameters()
    )
    per_server = math.ceil(parameters / first.job.servers)
    model = ClusterModel(
        name="calibrated from " + ", ".join(p.name for p in paths),
        compute=compute,
        network=NetworkModel(latency_ms=_START[2]),
        server=ServerModel(
            message_ms=round(max(0.0, server_ms - per_server * 1e-6), 5),
            ns_per_parameter=1,
            reply_ms=_START[1],
            applies_after_step=overlap,
        ),
        nodes=nodes,
        host_cpu=HostCpuModel(
            worker_ms=_START[0],
            compute_ms=round(statistics.mean(recorded), 4) if recorded else 0.0,
            evaluator_ms=round(evaluator_ms, 3),
            driver_ms=_START[3],
        ),
        startup_s=round(statistics.median(_startup_s(r.run, r.measured) for r in runs), 3),
    )
    rounds: list[dict[str, Any]] = []
    if refine:
        model, rounds = _refine(model, runs)
    replays = [_replay_whole(model, r) for r in runs]
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


def _seconds_per_step(run: RunData, *, required: bool = True) -> dict[str, float]:
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
    if not measured and required:
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


def _load_runs(paths: list[Path]) -> list[CalibrationRun]:
    datasets: dict[tuple[Any, ...], ArrayDataset] = {}
    runs = []
    for path in paths:
        run = load_run(path)
        _check_usable(run)
        job = _job_config(run)
        key = (job.dataset, job.data_dir, job.mnist1d_samples)
        if key not in datasets:  # loaded once: the timings and every replay use it
            datasets[key] = load_dataset(
                job.dataset, job.data_dir, mnist1d_samples=job.mnist1d_samples
            )
        summary = run.summary
        assert summary is not None  # a complete run has one
        runs.append(
            CalibrationRun(
                path=path,
                run=run,
                job=job,
                dataset=datasets[key],
                workers=_workers(run),
                measured=_seconds_per_step(run),
                wall_s=summary.wall_time_s,
            )
        )
    return runs


def _node_shape(runs: list[CalibrationRun], cores: int | None) -> NodeModel:
    """Where the runs' processes ran: on one node (this machine), all of them share its
    cores; over several, the workers are spread as evenly and the cores are not known."""
    nodes = max(_nodes_of(r.run) for r in runs)
    if nodes <= 1:
        return NodeModel(
            workers_per_node=MAX_WORKERS,
            cores=cores or os.cpu_count() or 1,
            servers_with_workers=True,
        )
    widest = max(r.workers for r in runs)
    return NodeModel(workers_per_node=-(-widest // nodes), cores=cores or 0)


def _nodes_of(run: RunData) -> int:
    placement = run.summary.placement if run.summary is not None else None
    value = (placement or {}).get("nodes", 1)
    return value if type(value) is int and 1 <= value <= MAX_WORKERS else 1


def _refine(
    model: ClusterModel, runs: list[CalibrationRun]
) -> tuple[ClusterModel, list[dict[str, Any]]]:
    """Fit the unknowns (a worker's framework CPU, the server's CPU per reply, latency) so
    that shortened replays of every run match its measured seconds per step in each
    protocol: Gauss-Newton on the relative errors, with the Jacobian taken by finite
    differences once and then updated (Broyden)."""
    keys = [(i, p) for i, r in enumerate(runs) for p in sorted(r.measured)]

    def residuals(theta: np.ndarray) -> tuple[np.ndarray, list[dict[str, float]]]:
        candidate = _with_unknowns(model, theta)
        simulated = [_replay(candidate, r, probe=True) for r in runs]
        errors = [simulated[i].get(p, 0.0) / runs[i].measured[p] - 1 for i, p in keys]
        return np.array(errors), simulated

    host = model.host_cpu
    theta = np.array(
        [host.worker_ms, model.server.reply_ms, model.network.latency_ms, host.driver_ms]
    )
    r0, simulated = residuals(theta)
    rounds = [_round(0, theta, simulated)]
    jacobian = np.zeros((len(keys), len(_UNKNOWNS)))
    for column, step in enumerate(_STEP):
        moved = theta.copy()
        moved[column] += step
        jacobian[:, column] = (residuals(moved)[0] - r0) / step
    # Levenberg-Marquardt within a trust region: the pace is a max() of paths (the step, a
    # core queue, the server's thread), so the errors bend where a bottleneck changes and a
    # full Gauss-Newton step can overshoot far; a step that does not help is not taken.
    damping, radius = 1e-3, 1.0
    for index in range(1, _REFINE_ROUNDS + 1):
        scale = np.sqrt(np.diag(jacobian.T @ jacobian)) + 1e-9
        lhs = np.vstack([jacobian, np.diag(np.sqrt(damping) * scale)])
        rhs = np.concatenate([-r0, np.zeros(len(_UNKNOWNS))])
        delta = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
        delta *= min(1.0, radius / max(float(np.abs(delta).max()), 1e-12))
        moved = np.maximum(theta + delta, 0.0)
        r1, simulated = residuals(moved)
        rounds.append(_round(index, moved, simulated))
        step = moved - theta
        if float(step @ step) > 0:
            jacobian += np.outer(r1 - r0 - jacobian @ step, step) / float(step @ step)
        if float(r1 @ r1) < float(r0 @ r0):
            theta, r0 = moved, r1
            damping, radius = damping / 3, radius * 1.5
        else:
            damping, radius = damping * 4, radius / 2
    return _with_unknowns(model, theta), rounds


def _round(index: int, theta: np.ndarray, simulated: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "round": index,
        **{name: round(float(value), 4) for name, value in zip(_UNKNOWNS, theta, strict=True)},
        "simulated_s_per_step": simulated[0],
        "simulated_s_per_step_by_run": simulated,
    }


def _with_unknowns(model: ClusterModel, theta: np.ndarray) -> ClusterModel:
    worker_ms, reply_ms, latency_ms, driver_ms = (round(max(0.0, float(v)), 4) for v in theta)
    return replace(
        model,
        host_cpu=replace(model.host_cpu, worker_ms=worker_ms, driver_ms=driver_ms),
        server=replace(model.server, reply_ms=reply_ms),
        network=replace(model.network, latency_ms=latency_ms),
    )


def _replay(model: ClusterModel, run: CalibrationRun, *, probe: bool) -> dict[str, float]:
    """The run's job on the simulator under `model`: its seconds per step per protocol, and
    (whole, not a probe) its wall time. A probe is shortened to about `_PROBE_GRADIENTS`
    gradients, evaluated as often per second as the whole job."""
    job = run.job
    gradients = job.epochs * len(run.dataset.y_train) / job.batch_size
    share = min(1.0, _PROBE_GRADIENTS / gradients) if probe else 1.0
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "cluster.yaml"
        path.write_text(cluster_yaml(model))
        replayed = replace(
            job,
            runtime="sim",
            cluster=str(path),
            step_time_ms=0.0,
            jitter_sigma=0.0,
            speed_factors=None,
            epochs=job.epochs * share,
            eval_every=min(1.0, job.eval_every / share),
            checkpoint_every=0.0 if probe else job.checkpoint_every,
            divergence_guard=job.divergence_guard and not probe,
            out=str(Path(scratch) / "run"),
        )
        summary = train(replayed, dataset=run.dataset).summary
        simulated = _seconds_per_step(load_run(Path(scratch) / "run"), required=False)
    if not probe:
        simulated["wall"] = summary.wall_time_s
    return simulated


def _replay_whole(model: ClusterModel, run: CalibrationRun) -> Replay:
    return Replay(
        run=run.path.name,
        workers=run.workers,
        measured={"wall": run.wall_s, **run.measured},
        simulated=_replay(model, run, probe=False),
    )
