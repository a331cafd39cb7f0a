"""Connecting to Ray, planning the job's resources against what it has, running the
supervisor, and letting go of Ray again: the Ray runtime as `train()` calls it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from syncswitch.config import TrainConfig
from syncswitch.control.controller import RunController
from syncswitch.control.memory import MemoryEstimate
from syncswitch.errors import ConfigError
from syncswitch.rundir import Summary
from syncswitch.runtime.ray.resources import ResourcePlan, plan_resources
from syncswitch.user_code import described
from syncswitch.workloads.data import ArrayData, JobData
from syncswitch.workloads.task import Task


def check_before_start(config: TrainConfig) -> None:
    """Refuse, before anything starts, a job this machine's own Ray could not run (e.g.
    --device cuda without CUDA). A cluster's resources are known only once joined."""
    from syncswitch.runtime.ray.connect import cluster_address, local_view

    if cluster_address(config.ray_address) is None:
        plan_resources(config, local_view(_local_cpus(config)))


def check_memory(config: TrainConfig, memory: MemoryEstimate) -> None:
    """Refuse, in one line before anything starts, a job whose model this machine's memory
    cannot hold (a local Ray: every process here). On a cluster the processes spread over
    nodes Ray places; the estimate is only reported there."""
    from syncswitch.runtime.ray.connect import cluster_address

    if cluster_address(config.ray_address) is not None:
        return
    available = available_memory_bytes()
    if available is not None and memory.total_bytes > available:
        raise ConfigError(
            f"this job's processes need about {memory.total_bytes / 2**30:.1f} GiB for the "
            f"model's {memory.parameters:,} parameters ({config.workers} workers, "
            f"{config.servers} server(s), the driver and the evaluator; activations not "
            f"counted), but this machine has {available / 2**30:.1f} GiB available: use fewer "
            "--workers or a smaller model, or run on a cluster (--ray-address)"
        )


def available_memory_bytes() -> int | None:
    """What the kernel says a new process could use without swapping (Linux's MemAvailable:
    free memory plus the page cache it can drop); None where it does not say."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_sendable(data: JobData, model_factory: Callable[[], torch.nn.Module], task: Task) -> None:
    """Ray pickles the model factory, the data (or their factories) and the task for its
    actors: one that cannot be pickled is one line here, not Ray's multi-line report later.
    (A user's datasets are pickled once more here: Ray sends each worker a copy anyway.)"""
    from ray import cloudpickle

    sent: list[tuple[str, object]] = [("model_factory=", model_factory), ("the task", task)]
    if not isinstance(data, ArrayData):  # arrays always pickle; a user's Dataset may not
        sent.append(("the data", data))
    for keyword, value in sent:
        try:
            cloudpickle.dumps(value)
        except Exception as error:
            raise ConfigError(
                f"{keyword} cannot be sent to Ray's actors (they receive it pickled): "
                f"{described(error)}; define it at the top level of a module, holding no open "
                "file, lock or generator (functools.partial of a top-level function works)"
            ) from None


def run_on_ray(
    config: TrainConfig,
    controller: RunController,
    data: JobData,
    model_factory: Callable[[], torch.nn.Module],
    task: Task,
) -> tuple[Summary, np.ndarray]:
    import ray

    from syncswitch.runtime.progress import starting
    from syncswitch.runtime.ray.connect import cluster_address, cluster_view, connect
    from syncswitch.runtime.ray.supervisor import RaySupervisor

    address = cluster_address(config.ray_address)
    starting(f"joining the Ray cluster at {address.for_ray}" if address else "starting Ray")
    started_ray = connect(config.ray_address, min_cpus=_local_cpus(config))
    try:
        where = f"the Ray cluster at {address.for_ray}" if address else "the local Ray instance"
        # Checked against what Ray has now, before any actor or placement group exists.
        resources = plan_resources(config, cluster_view(where))
        supervisor = RaySupervisor(
            controller, data, model_factory, task, resources, progress=config.progress
        )
        return supervisor.execute()
    finally:
        if started_ray:
            ray.shutdown()  # only a local instance this call started; never a joined cluster


def _local_cpus(config: TrainConfig) -> int:
    # One CPU per actor, whatever the devices (resources.plan_resources asks for that).
    return int(ResourcePlan().cpus(config.workers, config.servers))
