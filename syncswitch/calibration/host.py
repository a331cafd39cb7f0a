"""The host CPU each role spends, from what calibration can see: the workers' own records and
timings of the same job's server and evaluator code on this machine."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from syncswitch.config import TrainConfig
from syncswitch.control.plan import RunPlan
from syncswitch.control.shard import ServerShard
from syncswitch.core.sync.optimizer import flatten_parameters
from syncswitch.core.sync.records import Gradient
from syncswitch.rundir import RunData
from syncswitch.runtime.evaluator import Evaluator
from syncswitch.workloads import ArrayDataset
from syncswitch.workloads.data import TRAIN, ArrayData
from syncswitch.workloads.task import Task

_SERVER_SAMPLES = 300  # gradients applied to time the server's CPU per gradient
_EVALUATIONS = 3


@dataclass(frozen=True)
class HostCosts:
    """Milliseconds of one core per step (worker), per gradient (server), per evaluation."""

    compute_ms: float | None  # the workers' recorded compute CPU; None: not recorded
    server_ms: float  # a shard receiving and applying one gradient (ASP), timed here
    evaluator_ms: float  # one evaluation of the test set, timed here


def recorded_compute_ms(run: RunData) -> float | None:
    """The workers' mean compute CPU per step (worker_steps.csv; Ray workers record it)."""
    rows = [(steps, cpu) for steps, cpu in run.compute_cpu if steps > 0 and cpu >= 0]
    steps = sum(n for n, _ in rows)
    if not steps:
        return None
    return 1e3 * sum(n * cpu for n, cpu in rows) / steps


def timed_costs(
    job: TrainConfig, dataset: ArrayDataset, make_model: Callable[[], torch.nn.Module]
) -> tuple[float, float]:
    """(server ms per gradient, evaluator ms per evaluation) of this job's model (made by
    `make_model`), as CPU time of this thread: the same code the server and the evaluator run."""
    torch.manual_seed(job.seed)
    model = make_model()
    weights = flatten_parameters(model).numpy()
    asp = job.with_schedule("asp", runtime="sim", cluster=None, out=None)
    data = ArrayData(dataset.with_validation(job.val_fraction))
    plan = RunPlan.resolve(asp, data.size(TRAIN))
    shard = ServerShard(plan.sync, weights.copy())
    shard.begin()
    gradient = torch.from_numpy(np.full(len(weights), 1e-6, dtype=np.float32))
    started = time.thread_time()
    for sequence in range(_SERVER_SAMPLES):
        shard.submit(
            Gradient(
                worker=0,
                sequence=sequence,
                computed_version=shard.sync.live.version,
                values=gradient,
                samples=job.batch_size,
                loss=1.0,
                step_time_s=0.0,
            )
        )
        shard.sync.optimizer.weights.numpy().copy()  # the reply's copy of the weights
    server_ms = 1e3 * (time.thread_time() - started) / _SERVER_SAMPLES
    threads = torch.get_num_threads()
    try:
        evaluator = Evaluator(data, make_model, Task())
        timings = []
        for _ in range(_EVALUATIONS):
            started = time.thread_time()
            evaluator.evaluate(weights)
            timings.append(time.thread_time() - started)
    finally:
        torch.set_num_threads(threads)
    return server_ms, 1e3 * statistics.median(timings)
