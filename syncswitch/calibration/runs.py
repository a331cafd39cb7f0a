"""What calibration reads of each finished Ray run, and what it fits directly from it.

The run's job and records (`load_runs`), its steady seconds per step per protocol
(`seconds_per_step`, also read back from each replay), the compute model fitted robustly to
its step times (`fit_compute`, `asp_cycle_sigma`), its start-up time (`startup_s`) and where
its processes ran (`node_shape`). The worker count is bounded before anything is sized by it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncswitch.config import TrainConfig, make_config
from syncswitch.config.limits import MAX_WORKERS
from syncswitch.core.cluster.model import ComputeModel, NodeModel
from syncswitch.errors import ConfigError, RunDirError
from syncswitch.import_path import is_import_path, resolve
from syncswitch.rundir import RunData, load_run, names
from syncswitch.rundir.parsing import float_cell, read_json_object, short
from syncswitch.workloads import ArrayDataset, build_model, dataset_names, load_dataset

_SPEED_FACTOR_TOLERANCE = 0.10
_WARM_UP = 0.2  # the share of each phase's updates left out of the step-cost fit
_WARM_UP_S = 5.0  # the run's first seconds, left out of the ASP cycle spread


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
    # The user's model, resolved from the command line's --model (never from config.json);
    # None: the run trained a built-in model.
    model_factory: Callable[[], torch.nn.Module] | None = None

    def build_model(self) -> torch.nn.Module:
        """A fresh model of the run's job: the user's, or the built-in one it names."""
        if self.model_factory is not None:
            return self.model_factory()
        return build_model(self.job.model_name, self.dataset)


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
    if _was_resumed(run):
        # Its times run across the restart (a new process, Ray started again): the gap
        # would be fitted as a step's jitter and the phases' pace.
        raise ConfigError(
            f"{str(run.path)!r} was resumed after a stop, and its times span the restart; "
            "calibrate from runs that ran start to end in one go"
        )
    if not run.applied_step_times:
        raise ConfigError(f"{str(run.path)!r} has no applied gradients in updates.csv")
    _workers(run)  # checked before anything is sized by it


def _was_resumed(run: RunData) -> bool:
    reliability = run.summary.reliability if run.summary is not None else None
    failures = reliability.failures if reliability is not None else []
    return any(f.get("kind") == "resumed" for f in failures)


def _workers(run: RunData) -> int:
    """config.json's worker count, bounded before anything is allocated per worker."""
    value = run.config.get("workers")
    if type(value) is not int or not 1 <= value <= MAX_WORKERS:
        raise ConfigError(
            f"{str(run.path)!r}: config.json: workers = {str(value)[:40]!r} is not allowed; it "
            f"must be an integer in 1..{MAX_WORKERS}"
        )
    return value


def fit_compute(step_times: dict[int, np.ndarray], workers: int) -> ComputeModel:
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


def asp_cycle_sigma(run: RunData) -> float | None:
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
        now = float_cell(time_s, "time_s")
        if worker in last and now > last[worker] and now >= _WARM_UP_S:
            cycles.append(now - last[worker])
            steps.append(float_cell(step_s, "step_time_s"))
        last[worker] = now
    if len(cycles) < 100:
        return None
    logs = np.log(cycles)
    q75, q25 = np.percentile(logs, [75, 25])
    return float((q75 - q25) / 1.349 * np.mean(cycles) / np.mean(steps))


def seconds_per_step(run: RunData, *, required: bool = True) -> dict[str, float]:
    """Measured seconds per worker step (ASP) or per round (BSP), per protocol, in steady
    state: the first `_WARM_UP` of each phase's updates is left out, since fresh processes
    run slower for a while (measured on Ray here: the first ~80 BSP rounds up to twice as
    long) and that would be taken for a cost of the protocol; the start-up time
    (`startup_s`) accounts for it instead."""
    workers = _workers(run)
    phases: list[tuple[str, list[float]]] = []
    for protocol, time_s in run.update_columns(("protocol", "time_s")):
        if not phases or phases[-1][0] != protocol:
            phases.append((protocol, []))
        phases[-1][1].append(float_cell(time_s, "time_s"))
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


def startup_s(run: RunData, measured: dict[str, float]) -> float:
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
        count, last_s = count + 1, float_cell(time_s, "time_s")
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


def check_named_code(path: Path, job: TrainConfig, model: str | None) -> None:
    """A run directory never chooses code to run (docs/security.md): a run whose config.json
    names its model by import path is calibrated only when the command line names the same
    path again (`--model`), as `--resume` asks; a dataset named by import path is refused
    (calibration holds a run's data as arrays of a built-in dataset). Nothing is imported."""
    where = f"cannot calibrate from {str(path)!r}"
    if is_import_path(job.dataset):
        raise ConfigError(
            f"{where}: its config.json names a dataset by import path ({short(job.dataset)}); "
            f"calibrate reads runs of {', '.join(dataset_names(arrays_only=True))} only, and "
            "never imports code a run directory names"
        )
    if not is_import_path(job.model):
        return  # a built-in model (--model, if given, is for the other runs)
    if model is None:
        raise ConfigError(
            f"{where}: its config.json names code to import (--model {short(job.model)}), and "
            "a run directory never chooses code to run: give --model again on the command "
            "line, if that is the code you mean"
        )
    if model != job.model:
        raise ConfigError(
            f"{where}: --model {short(model)} is not the model it trained "
            f"({short(job.model)}); calibrate replays the run's own job"
        )


def load_runs(paths: list[Path], model: str | None = None) -> list[CalibrationRun]:
    """Each run as the fit reads it. `model`: the import path of the runs' own model, from
    the command line only; it is imported (once) only after every run has been checked."""
    loaded = []
    for path in paths:
        run = load_run(path)
        _check_usable(run)
        job = _job_config(run)
        check_named_code(path, job, model)
        if job.dataset not in dataset_names(arrays_only=True):
            # Its timings and replays hold the data as arrays (an ArrayDataset).
            raise ConfigError(
                f"{str(path)!r} trained dataset {job.dataset!r}; calibrate reads runs of "
                f"{', '.join(dataset_names(arrays_only=True))} only, for now"
            )
        loaded.append((path, run, job))
    if model is not None and not any(is_import_path(job.model) for _, _, job in loaded):
        raise ConfigError(
            f"--model {short(model)}: every run given trained a built-in model; drop --model"
        )
    factory = resolve(model, "--model") if model is not None else None
    datasets: dict[tuple[Any, ...], ArrayDataset] = {}
    runs = []
    for path, run, job in loaded:
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
                measured=seconds_per_step(run),
                wall_s=summary.wall_time_s,
                model_factory=factory if is_import_path(job.model) else None,
            )
        )
    return runs


def node_shape(runs: list[CalibrationRun], cores: int | None) -> NodeModel:
    """Where the runs' processes ran: on one node (this machine), all of them share its
    cores; over several, the workers are spread as evenly and the cores are not known."""
    nodes = max(_nodes_of(r.run) for r in runs)
    # Values through shared memory where a worker and a server shared a node, as the runs did.
    shared = all(_used_shared_memory(r.path) for r in runs)
    if nodes <= 1:
        return NodeModel(
            workers_per_node=MAX_WORKERS,
            cores=cores or os.cpu_count() or 1,
            servers_with_workers=True,
            shared_memory=shared,
        )
    widest = max(r.workers for r in runs)
    return NodeModel(workers_per_node=-(-widest // nodes), cores=cores or 0, shared_memory=shared)


def emulated_link(runs: list[CalibrationRun]) -> tuple[float, float, float] | None:
    """The emulated links every run's messages crossed (the workers' Gbit/s and latency in ms,
    the servers' Gbit/s; 0: none on that side), or None where none did; runs that differ in
    them cannot share one cluster model."""
    links = {_link_of(r.run.config) for r in runs}
    if len(links) > 1:
        described = ", ".join(
            "no link"
            if link is None
            else f"{link[0]:g} Gbit/s and {link[1]:g} ms (servers' {link[2]:g} Gbit/s)"
            for link in sorted(links, key=lambda link: link or (0.0, 0.0, 0.0))
        )
        raise ConfigError(
            f"the runs crossed different emulated links ({described}): calibrate runs of one "
            "network together"
        )
    return links.pop()


def _link_of(config: dict[str, Any]) -> tuple[float, float, float] | None:
    """A run's --link-gbps, --link-latency-ms and --server-link-gbps from its config.json
    (which is untrusted: anything but a positive finite number reads as no link)."""

    def number(key: str) -> float:
        value = config.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return 0.0
        return float(value) if math.isfinite(value) and value > 0 else 0.0

    gbps, server_gbps = number("link_gbps"), number("server_link_gbps")
    if gbps == 0 and server_gbps == 0:
        return None
    return gbps, number("link_latency_ms") if gbps > 0 else 0.0, server_gbps


def computed_on_cpu(runs: list[CalibrationRun]) -> bool:
    """Whether every run's workers computed real gradients on the CPU (no emulated step time,
    summary.json's worker device `cpu`): their "device" is then the host's cores."""
    for r in runs:
        if r.run.config.get("step_time_ms"):
            return False
        placement = r.run.summary.placement if r.run.summary is not None else None
        resources = (placement or {}).get("resources")
        worker = resources.get("worker") if isinstance(resources, dict) else None
        if not isinstance(worker, dict) or worker.get("device") != "cpu":
            return False
    return True


def _used_shared_memory(path: Path) -> bool:
    """Whether the run's workers passed values through shared memory (actors.json says how
    many connections did); a run from before shared memory, or on the socket, did not."""
    try:
        actors = read_json_object(path / names.ACTORS)
    except (FileNotFoundError, RunDirError):
        return False
    plane = actors.get("data_plane_shared_memory")
    connections = plane.get("connections") if isinstance(plane, dict) else None
    return type(connections) is int and connections > 0


def _nodes_of(run: RunData) -> int:
    placement = run.summary.placement if run.summary is not None else None
    value = (placement or {}).get("nodes", 1)
    return value if type(value) is int and 1 <= value <= MAX_WORKERS else 1
