"""The worker actor: computes real PyTorch gradients on its own shard; each step is one
data-plane message to every server shard (runtime/dataplane/) and their replies. The step
itself (a gradient or a local round, injected faults, the step time) is runtime/step.py's, as
the simulator's is: in a local-H phase (core/sync/local.py) the reply names the worker's round,
and it takes H steps of its own SGD and sends one delta, one message per H steps."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import ray
import torch
from ray.exceptions import GetTimeoutError

from syncswitch.core.cluster.emulation import EmulationConfig, received_at, sent_at
from syncswitch.core.reliability.faults import Fault, FaultKind
from syncswitch.core.sync.local import ModelBuffers
from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.core.sync.precision import Precision
from syncswitch.core.sync.records import WorkerStats
from syncswitch.core.sync.server_optimizer import OptimizerConfig
from syncswitch.core.sync.sharding import worker_shard
from syncswitch.core.sync.wire_dtype import WireDtype, encode
from syncswitch.runtime.dataplane import WorkerChannel, encode_request
from syncswitch.runtime.gradient import backward_on_batch
from syncswitch.runtime.ray.allocator import keep_freed_memory
from syncswitch.runtime.ray.placement import ActorPlace, here
from syncswitch.runtime.replies import Pulled, join_replies
from syncswitch.runtime.step import Computed, WorkerStep, WorkerStreams
from syncswitch.workloads.data import TRAIN, JobData

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
    # A local round's own optimizer: the server's kind.
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    threads: int = 1  # torch intra-op threads (the resource plan's)
    device: str = "cpu"  # "cuda": the model and its batches on the GPU Ray assigned
    wire_dtype: WireDtype = WireDtype.FLOAT32  # what messages' values travel as
    precision: Precision = Precision.FLOAT32  # what the forward pass computes in
    shared_memory: bool = True  # offer servers on this machine shared memory for the values


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        """The dataset comes with `run`, not here: Ray logs an error for a restartable actor
        whose constructor arguments hold an object reference (ray-project/ray#53727)."""
        keep_freed_memory()  # before the model: its every step's temporaries (allocator.py)
        torch.set_num_threads(spec.threads)
        torch.manual_seed(spec.seed * 7919 + spec.worker)
        self.spec = spec
        self.data: JobData | None = None
        self.servers: list = []
        # Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigned, so "cuda" is that one.
        self.device = torch.device(spec.device)
        self.model = spec.model_factory().to(self.device)
        self.model.train()
        self.flat = FlatParameters(self.model)
        total = self.flat.values.numel()
        self._shard_sizes = [len(range(*part.indices(total))) for part in spec.shards]
        # Each shard's message on the emulated links, if there are any (its values' bytes).
        sizes = [size * spec.wire_dtype.itemsize for size in self._shard_sizes]
        self._link_s = [spec.emulation.link_s(nbytes) for nbytes in sizes]
        self._server_link_s = [spec.emulation.server_link_s(nbytes) for nbytes in sizes]
        self._step_times: list[float] = []
        self._compute_times: list[float] = []
        # The step's CPU as well as its wall time: where workers share cores, wall time
        # includes waiting for one, and CPU time shows what the step itself cost.
        self._compute_cpu_times: list[float] = []
        self._wait_times: list[float] = []
        self.step = WorkerStep(spec.worker, spec.emulation, spec.faults, spec.optimizer)

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
        if self.data is None:
            # A dataset factory builds the training set here, on first use: this worker
            # reads only its own shard's indices of it.
            self.data = ray.get(dataset[0])
            spec = self.spec
            samples = self.data.size(TRAIN)
            self._shard = worker_shard(samples, spec.worker, spec.workers, spec.seed)
        self.servers = servers
        self.incarnation = incarnation
        self.step.start(incarnation)
        # Sockets connect in the background while the rejoin call runs.
        channel = WorkerChannel(
            ray.get([s.endpoint.remote() for s in servers]),
            probe=self._probe_servers,
            wire_dtype=self.spec.wire_dtype,
            shared=self._shared_memory(),
        )
        self._compute_in(channel)
        try:
            sequence, batches, pulled = self._rejoin()
            self._position(sequence, batches)
            self._train(channel, sequence, pulled, started_at)
        finally:
            channel.close()
        return self._stats()

    def _train(
        self, channel: WorkerChannel, sequence: int, pulled: Pulled, started_at: float
    ) -> None:
        while not pulled.done:
            started_wall, started = time.time(), time.perf_counter()
            started_cpu = time.thread_time()
            result = self.step.compute(
                pulled.weights, pulled.local, pulled.progress, self._gradient, self._buffers
            )
            _end_if(result.ends)
            compute_s = time.perf_counter() - started
            self._compute_cpu_times.append(time.thread_time() - started_cpu)
            # Emulated device time: the step lasts the modelled time, or the real compute if
            # longer. The gradient is handed over now and the server applies it when the step
            # ends, so the transfer overlaps the emulated compute instead of a sleep here.
            step_s = self.step.real_step_s(
                self.streams.step_times,
                result.steps,
                pulled.progress,
                started_wall - started_at,
                compute_s,
            )
            ready_at = started_wall + step_s if self.spec.emulation.enabled else None
            pulled = self._push_pull(channel, sequence, pulled.versions, result, step_s, ready_at)
            self._wait_times.append(time.perf_counter() - started - step_s)
            # A round of H steps is H steps of its mean time (worker_steps.csv is per step).
            count = max(result.steps, 1)
            self._compute_times.extend([compute_s / count] * count)
            self._step_times.extend([step_s / count] * count)
            sequence += 1

    # -- internals --------------------------------------------------------------------------

    def _gradient(self, weights: np.ndarray) -> tuple[np.ndarray, float]:
        assert self.data is not None, "run() fetches the data before the first step"
        self.flat.load(weights)
        loss = backward_on_batch(
            self.model,
            self.flat,
            self.data,
            self.streams.batches.next_indices(),
            self.spec.loss_fn,
            self.streams.generator,
            self.spec.precision,
        )
        # One flat copy off the device (on a GPU); the buffer is reused next step, which is
        # safe because every server has replied (so received it) before the next step.
        return self.flat.gradient_to_host(), loss

    def _shared_memory(self) -> list[int] | None:
        """Each server's number of values, offered through shared memory (servers on this
        machine take it: dataplane/shared.py)."""
        return self._shard_sizes if self.spec.shared_memory else None

    def _compute_in(self, channel: WorkerChannel) -> None:
        """Where every server shares memory with this worker and float32 is on the wire,
        the model computes in that memory: replies land in its weights and its gradient is
        the request, so neither crossing copies here (dataplane/shared.py)."""
        segment = channel.segment
        self._whole: np.ndarray | None = None
        # A local round steps the model's own weights (core/sync/local.py, InnerLoop.run).
        self._buffers = (
            None
            if self.flat.staged
            else ModelBuffers(self.flat.values.numpy(), self.flat.gradient.numpy())
        )
        if segment is None or self.spec.wire_dtype is not WireDtype.FLOAT32 or self.flat.staged:
            return
        regions = segment.regions
        self.flat.place(torch.from_numpy(regions.reply), torch.from_numpy(regions.request))
        self._whole = regions.reply
        self._buffers = ModelBuffers(regions.reply, regions.request)

    def _rejoin(self) -> tuple[int, int, Pulled]:
        """Join (again) at the current version; the servers say which sequence comes next and
        how many batches the worker had drawn before it."""
        answers = ray.get(
            [s.rejoin.remote(self.spec.worker, self.incarnation) for s in self.servers]
        )
        replies = [r for _, _, r in answers]
        start = max(start for start, _, _ in answers)
        batches = max(batches for _, batches, _ in answers)
        return start, batches, join_replies(replies, ray.get)

    def _position(self, sequence: int, batches: int | None = None) -> None:
        """Where the worker's streams stand after `sequence` steps (runtime/step.py)."""
        spec = self.spec
        self.streams = WorkerStreams.at(
            self._shard,
            worker=spec.worker,
            batch_size=spec.batch_size,
            seed=spec.seed,
            emulation=spec.emulation,
            sequence=sequence,
            batches=batches,
        )

    def _push_pull(
        self,
        channel: WorkerChannel,
        sequence: int,
        versions: list[int],
        step: Computed,
        step_s: float,
        ready_at: float | None,
    ) -> Pulled:
        spec = self.spec
        link_s = self._link_s  # per shard: its message's time on the emulated link, or 0
        # When each shard's message has crossed that link, for its server to hold it until.
        latency_s = spec.emulation.latency_s
        due = [None] * len(link_s) if ready_at is None else sent_at(ready_at, link_s, latency_s)
        replies = channel.exchange(
            [
                (
                    encode_request(
                        spec.worker,
                        self.incarnation,
                        sequence,
                        version,
                        spec.batch_size * max(step.steps, 1),
                        step.loss,
                        step_s,
                        due_at,
                        step.steps,
                        step.norm,
                    ),
                    encode(step.gradient[shard], spec.wire_dtype),
                )
                for shard, version, due_at in zip(spec.shards, versions, due, strict=True)
            ]
        )
        if spec.emulation.has_link:
            # The replies cross the emulated links too: their servers' (the time each is
            # done with it is stamped on it) and, one after another, this worker's.
            now = time.time()
            untils = [r.link_until for r in replies]
            until = received_at(now, untils, link_s, self._server_link_s, latency_s)
            if until > now:
                time.sleep(until - now)
        return join_replies(replies, ray.get, whole=self._whole)

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


def _end_if(ends: FaultKind | None) -> None:
    """Carry out an injected crash or hang."""
    if ends is FaultKind.CRASH:
        os._exit(1)  # no cleanup, as when a machine fails
    if ends is FaultKind.HANG:
        threading.Event().wait()  # alive, silent, forever
