"""The parameter-server actor: a thin shell around one `ServerShard`.

Workers reach it two ways. Every step goes over the data plane (runtime/dataplane/): one
message with the worker's gradient slice, answered with the weights it should compute on
next. A step that must wait (at a BSP barrier, or held by an SSP bound) is simply not answered
yet: the worker's connection waits here until the synchronizer releases that worker.
Everything else (rejoin, pull, drain, the controller's calls: `act` and `ask` take a function
of the shard, runtime/shards.py) is a Ray call. Every
protocol decision is the shard's synchronizer's, every run decision the controller's; this
class only maps them to messages and replies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import ray
import torch

from syncswitch.control.shard import ServerShard, ShardReport
from syncswitch.core.cluster.emulation import EmulationConfig
from syncswitch.core.sync.records import Gradient, Outcome
from syncswitch.core.sync.wire_dtype import WireDtype
from syncswitch.runtime import shards
from syncswitch.runtime.dataplane import Request, ServerEndpoint
from syncswitch.runtime.ray.allocator import keep_freed_memory
from syncswitch.runtime.ray.placement import ActorPlace, here
from syncswitch.runtime.replies import Reply, ReplyCache
from syncswitch.runtime.shards import ShardAction, ShardSpec

# Above this size one shared object-store copy per version beats inlining weights into every
# Ray reply (small models are faster inline: no second fetch). Data-plane replies are raw.
_SHARED_WEIGHTS_BYTES = 1 << 20

T = TypeVar("T")


class ParameterServer:
    def __init__(
        self,
        spec: ShardSpec,
        *,
        threads: int = 1,
        device: str = "cpu",
        host: str | None = None,
        link: EmulationConfig | None = None,
    ) -> None:
        """The shard is built here, on the actor's node and `device`, as the simulator
        builds its own (runtime/shards.py). `link`: the run's emulation, whose servers' link
        (if any) this server's messages cross."""
        torch.set_num_threads(threads)
        keep_freed_memory()  # a barrier's sum and the optimizer's temporaries (allocator.py)
        self.device = device
        self.shard = spec.build(device=device)
        self._workers = spec.config.workers
        # The data plane's thread and Ray's call threads both touch the shard, always holding
        # the lock; a worker left waiting is registered under it, so no release is missed.
        self._lock = threading.Lock()
        self._waiters: dict[int, int] = {}  # worker -> the data-plane connection to answer
        self._incarnations: dict[int, int] = {}  # worker -> its current incarnation
        self._replies = ReplyCache()
        self._shared: tuple[int, list] | None = None  # version -> [ObjectRef] (large models)
        self._last_heard: dict[int, float] = {}  # worker -> wall time of its last message
        self._peers: list = []  # the run's other servers (a clipped round's norm, clipping.py)
        self._endpoint = ServerEndpoint(
            host or ray.util.get_node_ip_address(),
            len(spec.initial),
            self._on_request,
            clock=time.time,
            wire_dtype=spec.config.wire_dtype,
            links=link,
        )

    def where(self) -> ActorPlace:
        return here(self.device)

    def endpoint(self) -> tuple[str, bytes]:
        """Where workers send their steps, and the token that admits them."""
        return self._endpoint.address, self._endpoint.token

    def connect_peers(self, servers: list, index: int) -> None:
        """The run's servers, this one being `servers[index]`: where its parts of clipped
        rounds' norms go."""
        self._peers = [server for i, server in enumerate(servers) if i != index]

    def ping(self) -> None:
        """A waiting worker asks whether this server is still alive (Ray answers if not)."""

    def rejected_messages(self) -> dict[str, int]:
        """Data-plane connections this server closed, by reason: a wrong token or a malformed
        message (nothing of it applied), or a reply its worker did not take."""
        return dict(self._endpoint.rejected)

    def shared_memory(self) -> tuple[int, dict[str, int]]:
        """Worker connections whose values came through shared memory, and the offers it
        declined by reason (a worker on another machine: "cannot open")."""
        return self._endpoint.attached, dict(self._endpoint.declined)

    def close(self) -> None:
        """Stop the data plane (an actor's process ending does the same; this is for a
        server built outside Ray, e.g. by a benchmark)."""
        self._endpoint.close()

    def begin(self) -> None:
        with self._lock:
            self.shard.begin()
            now = time.time()
            self._last_heard = {w: now for w in range(self._workers)}

    def pull(self, worker: int) -> Reply:
        """The driver's copy (the run's final weights): the float32 master weights, which a
        narrower --wire-dtype rounds only on their way to the workers."""
        with self._lock:
            reply = self._weights_reply()
            if self.shard.sync.config.wire_dtype is WireDtype.FLOAT32:
                return reply
            weights = self.shard.sync.optimizer.weights_on_cpu().numpy().copy()
            return reply._replace(weights=weights)

    def rejoin(self, worker: int, incarnation: int = 0) -> tuple[int, int, Reply]:
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
            norm=request.norm,
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

    # -- the controller's calls ------------------------------------------------------------------

    def act(self, action: ShardAction) -> None:
        """One of the controller's calls that may release workers (runtime/shards.py: a
        policy's decision, finish, a lost worker, a rollback); those it releases are answered."""
        with self._lock:
            self._release(action(self.shard))

    def ask(self, query: Callable[[ServerShard], T]) -> T:
        """Anything else of the shard's, under the lock (a snapshot requested or taken)."""
        with self._lock:
            return query(self.shard)

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
        for norm in outcome.norm_partials:
            # A clipped round's norm is every shard's: tell the others this one's part.
            for peer in self._peers:
                peer.act.remote(shards.norm_arrived(norm))
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
        # Always under the lock: the live weights are sent, no step can change them meanwhile.
        self._replies.current(self.shard.sync, decoded=False)
        self._endpoint.send(connection, self._replies.header, self._replies.wire)

    def _weights_reply(self) -> Reply:
        reply = self._replies.current(self.shard.sync)
        if self._replies.weights.nbytes > _SHARED_WEIGHTS_BYTES:
            if self._shared is None or self._shared[0] != reply.version:
                self._shared = (reply.version, [ray.put(self._replies.weights)])
            return reply._replace(weights=self._shared[1])
        return reply
