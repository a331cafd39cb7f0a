"""Real gradients for every simulated worker, from one model instance.

A Ray worker keeps its own model; here one model computes every worker's gradient in turn, and
what a Ray worker keeps besides the parameters is kept per worker and swapped in around each
step: its data order, its augmentation generator, its torch RNG state (dropout), and its
buffers (BatchNorm running statistics). Each is seeded and advanced exactly as
runtime/ray/worker.py does (both position a worker's streams with runtime/step.py), so a
simulated worker computes the gradient its Ray twin would compute on the same weights (both
call runtime/gradient.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from syncswitch.control.plan import RunPlan
from syncswitch.core.cluster.emulation import EmulationConfig, StepTimeModel
from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.core.sync.precision import Precision
from syncswitch.core.sync.sharding import worker_shard
from syncswitch.runtime.gradient import backward_on_batch
from syncswitch.runtime.step import WorkerStreams
from syncswitch.workloads.data import TRAIN, JobData


@dataclass
class WorkerData:
    """What one worker carries from step to step, besides the weights it pulls."""

    streams: WorkerStreams  # data order, augmentation, step times (runtime/step.py)
    rng_state: torch.Tensor  # torch's global RNG, as the worker's own process would hold it
    buffers: list[torch.Tensor]  # the model's buffers (BatchNorm statistics), if it has any


class GradientComputer:
    def __init__(
        self,
        data: JobData,
        model_factory: Callable[[], torch.nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        *,
        workers: int,
        batch_size: int,
        seed: int,
        emulation: EmulationConfig,
        precision: Precision = Precision.FLOAT32,
    ) -> None:
        self.data = data
        self.model_factory = model_factory
        self.loss_fn = loss_fn
        self.workers = workers
        self.batch_size = batch_size
        self.seed = seed
        self.emulation = emulation
        self.precision = precision  # as the Ray workers' (runtime/gradient.py)
        self.model = model_factory()
        self.model.train()
        self.flat = FlatParameters(self.model)
        self._buffers = list(self.model.buffers())
        self._data: dict[int, WorkerData] = {}
        samples = data.size(TRAIN)
        self._shards = [worker_shard(samples, w, workers, seed) for w in range(workers)]

    @classmethod
    def of(
        cls,
        plan: RunPlan,
        data: JobData,
        model_factory: Callable[[], torch.nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> GradientComputer:
        """The computer of `plan`'s workers, set up as its Ray workers would be
        (runtime/ray/supervisor.py)."""
        return cls(
            data,
            model_factory,
            loss_fn,
            workers=plan.workers,
            batch_size=plan.job.batch_size,
            seed=plan.job.seed,
            emulation=plan.emulation,
            precision=Precision(plan.job.precision),
        )

    def position(
        self, worker: int, sequence: int, *, new_process: bool, batches: int | None = None
    ) -> None:
        """Put `worker` where it stands after `sequence` steps (a start, a restart, a resume),
        its data order after `batches` batches (`sequence` unless a local phase made some
        messages stand for several).

        `new_process`: its process is new (the run's start, a restart after a crash), so its
        RNG and buffers start afresh as a new Ray actor's do; otherwise (the servers were
        replaced under a live worker) they carry on.
        """
        streams = WorkerStreams.at(
            self._shards[worker],
            worker=worker,
            batch_size=self.batch_size,
            seed=self.seed,
            emulation=self.emulation,
            sequence=sequence,
            batches=batches,
        )
        old = self._data.get(worker)
        if new_process or old is None:
            rng_state, buffers = self._fresh_process(worker)
        else:
            rng_state, buffers = old.rng_state, old.buffers
        self._data[worker] = WorkerData(streams, rng_state, buffers)

    def step_times(self, worker: int) -> StepTimeModel:
        return self._data[worker].streams.step_times

    def gradient(self, worker: int, weights: np.ndarray) -> tuple[np.ndarray, float]:
        """`worker`'s next gradient (a copy of its own) and loss on `weights`."""
        data = self._data[worker]
        self.flat.load(weights)
        for mine, kept in zip(self._buffers, data.buffers, strict=True):
            mine.copy_(kept)
        torch.set_rng_state(data.rng_state)
        loss = backward_on_batch(
            self.model,
            self.flat,
            self.data,
            data.streams.batches.next_indices(),
            self.loss_fn,
            data.streams.generator,
            self.precision,
        )
        data.rng_state = torch.get_rng_state()
        for mine, kept in zip(self._buffers, data.buffers, strict=True):
            kept.copy_(mine)
        return self.flat.gradient.numpy().copy(), loss

    def _fresh_process(self, worker: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        # A Ray worker seeds torch and then builds its model, which draws from that RNG; the
        # state after the build is where its training steps start.
        torch.manual_seed(self.seed * 7919 + worker)
        fresh = self.model_factory()
        buffers = [b.detach().clone() for b in fresh.buffers()]
        return torch.get_rng_state(), buffers
