"""The worker actor: computes real PyTorch gradients on its own shard; each step is one
data-plane message to every server shard (runtime/dataplane.py) and their replies. In a
local-H phase (core/sync/local.py) the reply names the worker's round: it takes H steps of its own
SGD and sends one delta, one message per H steps."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import ray
import torch
from ray.exceptions import GetTimeoutError

from syncswitch.core.cluster.emulation import EmulationConfig, StepTimeModel
from syncswitch.core.reliability.faults import Fault, FaultKind, inject
from syncswitch.core.sync.local import InnerLoop, LocalRound
from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.core.sync.records import WorkerStats
from syncswitch.core.sync.sharding import BatchStream, worker_shard
from syncswitch.runtime.dataplane import WorkerChannel, encode_request
from syncswitch.runtime.gradient import backward_on_batch
from syncswitch.runtime.ray.placement import ActorPlace, here
from syncswitch.workloads import ArrayDataset

_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class WorkerSpec:
    worker: int
    workers: int
    batch_size: int
    seed: int
    emulation: EmulationConfig
    model_factory: Callable[[], torch.nn.Module]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    shards: tuple[slice, ...]  # the flat-parameter slice each server holds
    faults: tuple[Fault, ...] = ()  # injected faults for this worker (tests of reliability)
    threads: int = 1  # torch intra-op threads (the resource plan's)
    device: str = "cpu"  # "cuda": the model and its batches on the GPU Ray assigned


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        """The dataset comes with `run`, not here: Ray logs an error for a restartable actor
        whose constructor arguments hold an object reference (ray-project/ray#53727)."""
        torch.set_num_threads(spec.threads)
        torch.manual_seed(spec.seed * 7919 + spec.worker)
        self.spec = spec
        self.dataset: ArrayDataset | None = None
        self.servers: list = []
        # Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigned, so "cuda" is that one.
        self.device = torch.device(spec.device)
        self.model = spec.model_factory().to(self.device)
        self.model.train()
        self.flat = FlatParameters(self.model)
        self._step_times: list[float] = []
        self._compute_times: list[float] = []
        # The step's CPU as well as its wall time: where workers share cores, wall time
        # includes waiting for one, and CPU time shows what the step itself cost.
        self._compute_cpu_times: list[float] = []
        self._wait_times: list[float] = []
        self.inner = InnerLoop()  # its own SGD in local phases

    def ready(self) -> ActorPlace:
        return here(self.spec.device)

    def run(
        self, started_at: float, servers: list, dataset: list, incarnation: int = 0
    ) -> WorkerStats:
        """Train until the server says the workload is done; return step-time statistics.

        `started_at` is the wall time at which the run began, for stragglers timed in seconds.
        `servers` are passed on every run, not only at construction: after a server failure
        they are replacements, and Ray restarts a crashed worker with its original arguments.
        `dataset` is [ObjectRef]: nested, so Ray passes the reference and this actor fetches
        the data itself, once per incarnation. `incarnation` counts restarts: an injected
        crash or hang happens in the first only.
        """
        if self.dataset is None:
            self.dataset = ray.get(dataset[0])
            spec = self.spec
            samples = len(self.dataset.y_train)
            self._shard = worker_shard(samples, spec.worker, spec.workers, spec.seed)
        self.servers = servers
        self.incarnation = incarnation
        self._faults = [f for f in self.spec.faults if not (f.kind.once and incarnation > 0)]
        # Sockets connect in the background while the rejoin call runs.
        channel = WorkerChannel(
            ray.get([s.endpoint.remote() for s in servers]), probe=self._probe_servers
        )
        try:
            sequence, batches, (versions, weights, done, progress), local = self._rejoin()
            self._position(sequence, batches)
            self._train(channel, sequence, versions, weights, done, progress, started_at, local)
        finally:
            channel.close()
        return self._stats()

    def _train(
        self,
        channel: WorkerChannel,
        sequence: int,
        versions: list[int],
        weights: np.ndarray,
        done: bool,
        progress: float,
        started_at: float,
        local: LocalRound | None = None,
    ) -> None:
        emulation = self.spec.emulation
        while not done:
            started_wall, started = time.time(), time.perf_counter()
            started_cpu = time.thread_time()
            steps = 0 if local is None else local.steps
            if local is None:
                gradient, loss = self._gradient(weights)
            else:
                # A local round: H steps of its own SGD, then one delta (core/sync/local.py).
                gradient, loss = self.inner.run(weights, local, self._gradient)
            gradient = self._inject_faults(gradient, progress)
            compute_s = time.perf_counter() - started
            self._compute_cpu_times.append(time.thread_time() - started_cpu)
            # Emulated device time: the step lasts the modelled time, or the real compute if
            # longer. The gradient is handed over now and the server applies it when the step
            # ends, so the transfer overlaps the emulated compute instead of a sleep here.
            base_s = (
                sum(self.step_time_model.next_step_s() for _ in range(max(steps, 1))) or compute_s
            )
            slowed_s = emulation.stragglers.step_time_s(
                self.spec.worker, base_s, progress, started_wall - started_at
            )
            step_s = max(slowed_s, compute_s)
            ready_at = started_wall + step_s if emulation.enabled else None
            versions, weights, done, progress, local = self._push_pull(
                channel, sequence, versions, gradient, loss, step_s, ready_at, steps
            )
            self._wait_times.append(time.perf_counter() - started - step_s)
            # A round of H steps is H steps of its mean time (worker_steps.csv is per step).
            count = max(steps, 1)
            self._compute_times.extend([compute_s / count] * count)
            self._step_times.extend([step_s / count] * count)
            sequence += 1

    # -- internals --------------------------------------------------------------------------

    def _gradient(self, weights: np.ndarray) -> tuple[np.ndarray, float]:
        assert self.dataset is not None, "run() fetches the dataset before the first step"
        self.flat.load(weights)
        loss = backward_on_batch(
            self.model,
            self.flat,
            self.dataset,
            self.batches.next_indices(),
            self.spec.loss_fn,
            self.generator,
        )
        # One flat copy off the device (on a GPU); the buffer is reused next step, which is
        # safe because every server has replied (so received it) before the next step.
        return self.flat.gradient_to_host(), loss

    def _rejoin(
        self,
    ) -> tuple[int, int, tuple[list[int], np.ndarray, bool, float], LocalRound | None]:
        """Join (again) at the current version; the servers say which sequence comes next and
        how many batches the worker had drawn before it."""
        answers = ray.get(
            [s.rejoin.remote(self.spec.worker, self.incarnation) for s in self.servers]
        )
        replies = [r for _, _, r in answers]
        start = max(start for start, _, _ in answers)
        batches = max(batches for _, batches, _ in answers)
        return start, batches, join_replies(replies), replies[0].local

    def _position(self, sequence: int, batches: int | None = None) -> None:
        """Data order as it stands after `batches` batches (`sequence` unless a local phase
        made some messages stand for several), jitter and augmentation after `sequence` steps,
        so a restarted worker or a resumed run goes on where the checkpoint left off."""
        spec = self.spec
        self.batches = BatchStream(self._shard, spec.batch_size, spec.seed, spec.worker)
        for _ in range(sequence if batches is None else batches):
            self.batches.next_indices()
        self.step_time_model = StepTimeModel(spec.emulation, spec.worker, spec.seed + sequence)
        self.generator = torch.Generator().manual_seed(
            spec.seed * 104729 + spec.worker + 7 * sequence
        )

    def _inject_faults(self, gradient: np.ndarray, progress: float) -> np.ndarray:
        gradient, ends = inject(self._faults, gradient, progress)
        if ends is FaultKind.CRASH:
            os._exit(1)  # no cleanup, as when a machine fails
        if ends is FaultKind.HANG:
            threading.Event().wait()  # alive, silent, forever
        return gradient

    def _push_pull(
        self,
        channel: WorkerChannel,
        sequence: int,
        versions: list[int],
        gradient: np.ndarray,
        loss: float,
        step_s: float,
        ready_at: float | None,
        local_steps: int = 0,
    ) -> tuple[list[int], np.ndarray, bool, float, LocalRound | None]:
        spec = self.spec
        replies = channel.exchange(
            [
                (
                    encode_request(
                        spec.worker,
                        self.incarnation,
                        sequence,
                        version,
                        spec.batch_size * max(local_steps, 1),
                        loss,
                        step_s,
                        ready_at,
                        local_steps,
                    ),
                    gradient[shard],
                )
                for shard, version in zip(spec.shards, versions, strict=True)
            ]
        )
        # Every shard computes the same round (they apply the same rounds in lockstep).
        return (*join_replies(replies), replies[0].local)

    def _probe_servers(self) -> bool:
        """Called while a reply is late: a dead server raises (RayActorError), which ends
        this run as a failed call to it did; a slow one only means waiting on. True when
        every server answered."""
        try:
            ray.get([s.ping.remote() for s in self.servers], timeout=_PROBE_TIMEOUT_S)
        except GetTimeoutError:
            return False
        return True

    def _stats(self) -> WorkerStats:
        return WorkerStats.of_steps(
            self.spec.worker,
            self._step_times,
            self._compute_times,
            self._wait_times,
            compute_cpu_times=self._compute_cpu_times,
        )


def join_replies(replies: list) -> tuple[list[int], np.ndarray, bool, float]:
    """Concatenate per-server replies into one flat weight vector (versions, weights, done,
    progress)."""
    parts = []
    for reply in replies:
        weights = reply.weights
        if isinstance(weights, list):  # large models: one shared object-store copy
            weights = ray.get(weights[0])
        parts.append(weights)
    flat = parts[0] if len(parts) == 1 else np.concatenate(parts)
    # Shards may be at different versions in ASP: each gradient slice names its own.
    progress = min(r.progress for r in replies)
    return [r.version for r in replies], flat, any(r.done for r in replies), progress
