"""The parameter-server actor: a thin threaded shell around one `ServerShard`.

Each worker makes one call per step, `push_pull`, which carries its gradient and returns the
weights it should compute on next. A call that must wait (at a BSP barrier, or held by an SSP
bound) simply does not return yet: its thread waits until the synchronizer releases that
worker. Every protocol decision is the shard's synchronizer's, every run decision the
controller's; this class only maps them to threads and replies.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import ray
import torch

from syncswitch.control.shard import ServerShard, ShardReport
from syncswitch.core.hyperparams import MomentumPolicy
from syncswitch.core.records import Decision, Gradient, Outcome, Snapshot
from syncswitch.core.synchronizer import SyncConfig
from syncswitch.runtime.ray.placement import here

# Above this size one shared object-store copy per version beats inlining weights into every
# reply (small models are faster inline: no second fetch).
_SHARED_WEIGHTS_BYTES = 1 << 20


class GradientMessage(NamedTuple):
    """One worker step, sent as a single call argument: Ray serializes each argument
    separately, and eight arguments cost about 0.2 ms more per call on each side than one."""

    worker: int
    sequence: int
    computed_version: int
    values: np.ndarray  # this server's slice of the flat gradient
    samples: int
    loss: float
    step_time_s: float
    ready_at: float | None  # emulation: wall time at which the emulated step ends


@dataclass(frozen=True)
class WeightsReply:
    version: int
    weights: np.ndarray | list  # the array, or [ObjectRef] for large models
    done: bool
    progress: float  # fraction of the training samples applied (emulated stragglers use it)


class ParameterServer:
    def __init__(
        self,
        config: SyncConfig,
        initial: np.ndarray,
        weight_decay: float,
        *,
        restore: dict | None = None,
        observe_steps: bool = False,
        threads: int = 1,
        device: str = "cpu",
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
        # A threaded actor: measured cheaper per call than an asyncio actor here, and its
        # sleeps are exact. Every touch of the shard holds the lock; a waiting call registers
        # its event under the lock, so a release can never be missed.
        self._lock = threading.Lock()
        self._waiters: dict[int, tuple[threading.Event, list[WeightsReply]]] = {}
        self._reply_cache: WeightsReply | None = None
        self._last_heard: dict[int, float] = {}  # worker -> wall time of its last call

    def where(self) -> dict:
        return here(self.device)

    def begin(self) -> None:
        with self._lock:
            self.shard.begin()
            now = time.time()
            self._last_heard = {w: now for w in range(self._workers)}

    def pull(self, worker: int) -> WeightsReply:
        with self._lock:
            return self._reply()

    def rejoin(self, worker: int) -> tuple[int, WeightsReply]:
        """A (new incarnation of a) worker starts: the sequence it starts at, and weights."""
        with self._lock:
            start = self.shard.rejoin(worker)
            self._last_heard[worker] = time.time()
            # A call of its previous incarnation may still wait here; let its thread go.
            stale = self._waiters.pop(worker, None)
            reply = self._reply()
            if stale is not None:
                stale[1].append(reply)
                stale[0].set()
            return start, reply

    def push_pull(self, message: GradientMessage) -> WeightsReply:
        if message.ready_at is not None:
            # Emulation: the gradient counts as arrived when its emulated step ends.
            delay_s = message.ready_at - time.time()
            if delay_s > 0:
                time.sleep(delay_s)
        worker = message.worker
        gradient = Gradient(
            worker=worker,
            sequence=message.sequence,
            computed_version=message.computed_version,
            # Arguments arrive read-only; the copy is the server's own.
            values=torch.from_numpy(np.array(message.values, dtype=np.float32)),
            samples=message.samples,
            loss=message.loss,
            step_time_s=message.step_time_s,
        )
        with self._lock:
            self._last_heard[worker] = time.time()
            outcome = self.shard.submit(gradient)
            self._release(outcome)
            if worker in outcome.released:
                return self._reply()
            event, slot = threading.Event(), []
            self._waiters[worker] = (event, slot)
        event.wait()
        return slot[0]

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
        self, state: dict, protocol: str, lr_scale: float, momentum: MomentumPolicy, label: str
    ) -> None:
        with self._lock:
            self._release(self.shard.roll_back(state, protocol, lr_scale, momentum, label))

    def drain(self) -> ShardReport:
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
        reply = self._reply()
        now = time.time()
        for worker in outcome.released:
            # Held until now, it was waiting on us, not silent: its silence starts here.
            self._last_heard[worker] = now
            waiter = self._waiters.pop(worker, None)
            if waiter is not None:
                event, slot = waiter
                slot.append(reply)
                event.set()

    def _reply(self) -> WeightsReply:
        sync = self.shard.sync
        cached = self._reply_cache
        if cached is None or cached.version != sync.version or cached.done != sync.done:
            weights = sync.optimizer.weights_on_cpu().numpy().copy()
            payload: np.ndarray | list = weights
            if weights.nbytes > _SHARED_WEIGHTS_BYTES:
                payload = [ray.put(weights)]
            cached = WeightsReply(sync.version, payload, sync.done, sync.progress)
            self._reply_cache = cached
        return cached
