"""The evaluator as the Ray runtime runs it: an actor at a lower CPU priority that says where
it runs. The evaluation itself is runtime/evaluator.py's, shared with the simulator."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from syncswitch.runtime.evaluator import Evaluator
from syncswitch.runtime.ray.allocator import keep_freed_memory
from syncswitch.runtime.ray.placement import ActorPlace, here
from syncswitch.workloads.data import JobData
from syncswitch.workloads.task import Task


class RayEvaluator(Evaluator):
    def __init__(
        self,
        data: JobData,
        model_factory: Callable[[], torch.nn.Module],
        task: Task,
        threads: int = 1,
        device: str = "cpu",
        nice: int = 0,
    ) -> None:
        """`nice` > 0 lowers this process's CPU priority: where the evaluator shares cores
        with workers and servers, an evaluation then takes only CPU they leave idle instead
        of delaying their steps."""
        if nice:
            os.nice(nice)
        keep_freed_memory()  # each evaluation batch's activations (allocator.py)
        super().__init__(data, model_factory, task, threads, device)

    def ready(self) -> ActorPlace:
        """Where this evaluator runs (node, host, device), for actors.json."""
        return here(self.device.type)
