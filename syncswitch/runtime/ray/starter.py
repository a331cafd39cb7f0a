"""Starting the run's actors: each role's actor built from the run plan and started in its
bundle of the placement group (runtime/ray/placement.py), on its role's device.

The supervisor decides when an actor starts (at the start, a restored server set, a new
evaluator); this module only knows how: the spec each one is built from, its Ray options,
and, for the servers, waiting until they answer and recording where they run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch

from syncswitch.control.plan import RunPlan
from syncswitch.core.sync.precision import Precision
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.runtime import shards
from syncswitch.runtime.dataplane.shared import shared_memory_wanted
from syncswitch.runtime.ray.actors import ActorDirectory, wait_ready
from syncswitch.runtime.ray.evaluator import RayEvaluator
from syncswitch.runtime.ray.placement import RunPlacement
from syncswitch.runtime.ray.resources import ResourcePlan
from syncswitch.runtime.ray.server import ParameterServer
from syncswitch.runtime.ray.worker import Worker, WorkerSpec
from syncswitch.workloads.task import Task

# Evaluations are off the update path: they may lag, the workers and servers must not wait.
_EVALUATOR_NICE = 10


@dataclass
class ActorStarter:
    """What every actor of the run is built from, and where it goes."""

    plan: RunPlan
    resources: ResourcePlan
    placement: RunPlacement
    actors: ActorDirectory
    model_factory: Callable[[], torch.nn.Module]
    task: Task
    dataset_ref: Any  # the job's data, put once in Ray's object store
    initial: np.ndarray  # the initial flat weights
    shards: list[slice]  # each server's slice of them

    def servers(self, restore: tuple[SynchronizerState, ...] | None) -> list:
        """Every server shard started (from `restore` where given) and answering."""
        role = self.resources.server
        server_cls = ray.remote(ParameterServer)
        # Actor handles: their methods' `.remote` is Ray's, which its types do not follow.
        servers: list[Any] = [
            server_cls.options(
                **self.placement.server_options(index),
                # Steps arrive on the data plane, not as calls: these threads serve only the
                # control calls (rejoin, ping, drain, decisions), none of which blocks long.
                max_concurrency=16,
            ).remote(spec, threads=role.threads, device=role.device, link=self.plan.emulation)
            for index, spec in enumerate(
                shards.shard_specs(self.plan, self.initial, self.shards, restore)
            )
        ]
        located = wait_ready([s.where.remote() for s in servers])
        self.actors.pids["servers"] = [where.pid for where in located]
        for index, where in enumerate(located):
            self.actors.locate(f"server {index}", where)
        if len(servers) > 1 and self.plan.sync.optimizer.max_grad_norm is not None:
            # A clipped BSP round's norm is every shard's: each tells the others its part.
            ray.get([s.connect_peers.remote(servers, i) for i, s in enumerate(servers)])
        return servers

    def evaluator(self) -> Any:
        role = self.resources.evaluator
        return (
            ray.remote(RayEvaluator)
            .options(**self.placement.evaluator_options())
            .remote(
                self.dataset_ref,
                self.model_factory,
                self.task,
                role.threads,
                role.device,
                nice=_EVALUATOR_NICE,
            )
        )

    def worker(self, index: int) -> Any:
        plan = self.plan
        spec = WorkerSpec(
            worker=index,
            workers=plan.workers,
            batch_size=plan.job.batch_size,
            seed=plan.job.seed,
            emulation=plan.emulation,
            model_factory=self.model_factory,
            loss_fn=self.task.loss_fn,
            shards=tuple(self.shards),
            faults=plan.faults.for_worker(index),
            optimizer=plan.sync.optimizer,
            threads=self.resources.worker.threads,
            device=self.resources.worker.device,
            wire_dtype=plan.sync.wire_dtype,
            precision=Precision(plan.job.precision),
            shared_memory=shared_memory_wanted(),
        )
        # Restartable: after a crash Ray starts the actor again with the same arguments, in
        # the same bundle (placed again on another node if its node was lost).
        options = {
            **self.placement.worker_options(index),
            "max_restarts": plan.reliability.max_worker_restarts,
        }
        return ray.remote(Worker).options(**options).remote(spec)
