"""The parameter-server actor: a thin shell around one `ServerShard`.

Workers reach it two ways. Every step goes over the data plane (runtime/dataplane.py): one
message with the worker's gradient slice, answered with the weights it should compute on
next. A step that must wait (at a BSP barrier, or held by an SSP bound) is simply not answered
yet: the worker's connection waits here until the synchronizer releases that worker.
Everything else (rejoin, pull, drain, the controller's decisions) is a Ray call. Every
protocol decision is the shard's synchronizer's, every run decision the controller's; this
class only maps them to messages and replies.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import ray
import torch

from syncswitch.control.shard import ServerShard, ShardReport
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.local import LocalRound
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Decision, Gradient, Outcome, Snapshot
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.core.sync.synchronizer import SyncConfig
from syncswitch.runtime.dataplane import Request, ServerEndpoint, encode_reply
from syncswitch.runtime.ray.placement import ActorPlace, here

# Above this size one shared object-store copy per version beats inlining weights into every
# Ray reply (small models are faster inline: no second fetch). Data-plane replies are raw.
_SHARED_WEIGHTS_BYTES = 1 << 20


@dataclass(frozen=True)
class WeightsReply:
    """The weights as a Ray call (rejoin, pull) returns them."""

    version: int
    weights: np.ndarray | list  # the array, or [ObjectRef] for large models
    done: bool
    progress: float  # fraction of the training samples applied (emulated stragglers use it)
    local: LocalRound | None = None  # the worker's next round in a local phase


@dataclass(frozen=True)
class _CachedWeights:
    """The weights of one version, copied once and shared by every reply until the next."""

    version: int
    done: bool
    progress: float
    weights: np.ndarray  # read-only: shared by every reply of this version
    header: bytes  # the data plane's reply header
    local: LocalRound | None  # a local phase's round, as of this version


class ParameterServer:
    def __init__(
        self,
        config: SyncConfig,
        initial: np.ndarray,
        weight_decay: float,
        *,
        restore: SynchronizerState | None = None,
        observe_steps: bool = False,
        threads: int = 1,
        device: str = "cpu",
        host: str | None = None,
    ) -> None:
        torch.set_num_threads(threads)
        self.device = device
        self.shard = ServerShard(
            config,
            initial,
            weight_decay,
            restore=restore,
            observe_steps=observe_steps,
            device=device,
        )
        self._workers = config.workers
        # The data plane's thread and Ray's call threads both touch the shard, always holding
        # the lock; a worker left waiting is registered under it, so no release is missed.
        self._lock = threading.Lock()
        self._waiters: dict[int, int] = {}  # worker -> the data-plane connection to answer
        self._incarnations: dict[int, int] = {}  # worker -> its current incarnation
        self._cache: _CachedWeights | None = None
        self._shared: tuple[int, list] | None = None  # version -> [ObjectRef] (large models)
        self._last_heard: dict[int, float] = {}  # worker -> wall time of its last message
        self._endpoint = ServerEndpoint(
            host or ray.util.get_node_ip_address(),
            len(initial),
            self._on_request,
            clock=time.time,
        )

    def where(self) -> ActorPlace:
        return here(self.device)

    def endpoint(self) -> tuple[str, bytes]:
        """Where workers send their steps, and the token that admits them."""
        return self._endpoint.address, self._endpoint.token

    def ping(self) -> None:
        """A waiting worker asks whether this server is still alive (Ray answers if not)."""

    def rejected_messages(self) -> dict[str, int]:
        """Data-plane connections this server closed, by reason: a wrong token or a malformed
        message (nothing of it applied), or a reply its worker did not take."""
        return dict(self._endpoint.rejected)

    def close(self) -> None:
        """Stop the data plane (an actor's process ending does the same; this is for a
        server built outside Ray, e.g. by a benchmark)."""
        self._endpoint.close()

    def begin(self) -> None:
        with self._lock:
            self.shard.begin()
            now = time.time()
            self._last_heard = {w: now for w in range(self._workers)}

    def pull(self, worker: int) -> WeightsReply:
        with self._lock:
            return self._weights_reply()

    def rejoin(self, worker: int, incarnation: int = 0) -> tuple[int, int, WeightsReply]:
        """A (new incarnation of a) worker starts: the sequence it starts at, the batches it
        has drawn before it (where its data order resumes), and weights."""
        with self._lock:
            start = self._admit(worker, incarnation)
            return start, self.shard.data_position(worker), self._weights_reply()

    def admit(self, worker: int, incarnation: int = 0) -> int:
        """`rejoin` without the weights (for a caller outside Ray, e.g. a benchmark)."""
        with self._lock:
            return self._admit(worker, incarnation)

    def _admit(self, worker: int, incarnation: int) -> int:
        start = self.shard.rejoin(worker)
        self._last_heard[worker] = time.time()
        self._incarnations[worker] = incarnation
        # A step of its previous incarnation may still wait here; nobody will read it.
        self._waiters.pop(worker, None)
        return start

    def _on_request(self, connection: int, request: Request) -> None:
        """One worker step, on the data plane's thread when its gradient counts as arrived."""
        worker = request.worker
        gradient = Gradient(
            worker=worker,
            sequence=request.sequence,
            computed_version=request.computed_version,
            values=torch.from_numpy(request.values),
            samples=request.samples,
            loss=request.loss,
            step_time_s=request.step_time_s,
            local_steps=request.local_steps,
        )
        with self._lock:
            self._last_heard[worker] = time.time()
            outcome = self.shard.submit(gradient)
            self._release(outcome)
            if worker in outcome.released:
                self._answer(connection)
            elif request.incarnation == self._incarnations.get(worker):
                self._waiters[worker] = connection
            # else: a step of an incarnation that is gone; the shard has counted it.

    # -- the controller's decisions -------------------------------------------------------------

    def carry_out(self, decision: Decision) -> None:
        with self._lock:
            self._release(self.shard.carry_out(decision))

    def finish(self) -> None:
        with self._lock:
            self._release(self.shard.finish())

    def worker_lost(self, worker: int) -> None:
        with self._lock:
            self._release(self.shard.worker_lost(worker))

    def request_snapshot(self, label: str) -> None:
        with self._lock:
            self.shard.request_snapshot(label)

    def final_snapshot(self) -> Snapshot:
        with self._lock:
            return self.shard.final_snapshot()

    def roll_back(
        self,
        state: SynchronizerState,
        protocol: ProtocolSpec,
        lr_scale: float,
        momentum: MomentumPolicy,
        label: str,
    ) -> None:
        with self._lock:
            self._release(self.shard.roll_back(state, protocol, lr_scale, momentum, label))

    def drain(self) -> ShardReport:
        if self._endpoint.failure is not None:
            raise RuntimeError(
                f"the data plane of this parameter server failed: {self._endpoint.failure!r}"
            ) from self._endpoint.failure
        with self._lock:
            now = time.time()
            silent_s = {
                w: round(now - t, 3) for w, t in self._last_heard.items() if w not in self._waiters
            }
            return self.shard.drain(silent_s)

    # -- internals --------------------------------------------------------------------------

    def _release(self, outcome: Outcome) -> None:
        if not outcome.released:
            return
        now = time.time()
        for worker in outcome.released:
            # Held until now, it was waiting on us, not silent: its silence starts here.
            self._last_heard[worker] = now
            connection = self._waiters.pop(worker, None)
            if connection is not None:
                self._answer(connection)

    def _answer(self, connection: int) -> None:
        cached = self._current()
        self._endpoint.send(connection, cached.header, cached.weights)

    def _current(self) -> _CachedWeights:
        sync = self.shard.sync
        cached = self._cache
        if cached is None or cached.version != sync.version or cached.done != sync.done:
            weights = sync.optimizer.weights_on_cpu().numpy().copy()
            weights.flags.writeable = False
            local = sync.local_round()
            cached = _CachedWeights(
                sync.version,
                sync.done,
                sync.progress,
                weights,
                encode_reply(sync.version, sync.done, sync.progress, local),
                local,
            )
            self._cache = cached
        return cached

    def _weights_reply(self) -> WeightsReply:
        cached = self._current()
        payload: np.ndarray | list = cached.weights
        if cached.weights.nbytes > _SHARED_WEIGHTS_BYTES:
            if self._shared is None or self._shared[0] != cached.version:
                self._shared = (cached.version, [ray.put(cached.weights)])
            payload = self._shared[1]
        return WeightsReply(cached.version, payload, cached.done, cached.progress, cached.local)
