"""The parameter-server actor: a thin threaded shell around the core Synchronizer.

Each worker makes one call per step, `push_pull`, which carries its gradient and returns the
weights it should compute on next. A call that must wait (at a BSP barrier, or held by an SSP
bound) simply does not return yet: its thread waits until the synchronizer releases that
worker. All protocol decisions are the synchronizer's; this class only maps them to futures.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import ray
import torch

from syncswitch.core.hyperparams import MomentumPolicy
from syncswitch.core.online import OnlineMonitor
from syncswitch.core.optimizer import FlatSGD
from syncswitch.core.protocol import ProtocolSpec
from syncswitch.core.records import Gradient, Outcome
from syncswitch.core.synchronizer import SyncConfig, Synchronizer

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
        monitor: OnlineMonitor | None = None,
        restore: dict | None = None,
    ) -> None:
        """`restore`: a snapshot's state to continue from (a replaced server, a resumed run)."""
        torch.set_num_threads(1)
        optimizer = FlatSGD(torch.from_numpy(np.array(initial)), weight_decay=weight_decay)
        self.sync = Synchronizer(config, optimizer)
        self._restored = restore is not None
        if restore is not None:
            self.sync.restore(restore)
        self.monitor = monitor  # straggler detection and the online policy, if any
        # A threaded actor: measured cheaper per call than an asyncio actor here, and its
        # sleeps are exact. Every touch of the synchronizer holds the lock; a waiting call
        # registers its event under the lock, so a release can never be missed.
        self._lock = threading.Lock()
        self._waiters: dict[int, tuple[threading.Event, list[WeightsReply]]] = {}
        self._snapshot: WeightsReply | None = None
        self._applied: list[tuple] = []
        self._dropped: list[tuple] = []
        self._switches: list = []
        self._evaluations: list[tuple] = []
        self._straggler_events: list[dict] = []
        self._decisions: list = []
        self._snapshots: list = []
        self._last_heard: dict[int, float] = {}  # worker -> wall time of its last call

    def pid(self) -> int:
        return os.getpid()

    def begin(self) -> None:
        """The workers start now: time before is not training time (a restored server's clock
        continues from its snapshot instead)."""
        with self._lock:
            if not self._restored:
                self.sync.restart_clock()
            now = time.time()
            self._last_heard = {w: now for w in range(self.sync.config.workers)}

    def pull(self, worker: int) -> WeightsReply:
        with self._lock:
            return self._reply()

    def rejoin(self, worker: int) -> tuple[int, WeightsReply]:
        """A (new incarnation of a) worker starts: the sequence it starts at, and weights."""
        with self._lock:
            start = self.sync.rejoin(worker)
            self._last_heard[worker] = time.time()
            # A call of its previous incarnation may still wait here; let its thread go.
            stale = self._waiters.pop(worker, None)
            reply = self._reply()
            if stale is not None:
                stale[1].append(reply)
                stale[0].set()
            return start, reply

    def worker_lost(self, worker: int) -> None:
        """The coordinator found `worker` dead or hung: stop waiting for it."""
        with self._lock:
            self._absorb(self.sync.worker_lost(worker))

    def request_snapshot(self, label: str) -> None:
        with self._lock:
            self.sync.request_snapshot(label)

    def final_snapshot(self) -> object:
        with self._lock:
            return self.sync.snapshot("final")

    def roll_back(
        self, state: dict, protocol: str, lr_scale: float, momentum_policy: str, reason: str
    ) -> None:
        """Go back to a checkpoint's state in place and stay in `protocol` (divergence)."""
        with self._lock:
            outcome = self.sync.roll_back(
                state,
                protocol=protocol,
                lr_scale=lr_scale,
                momentum_policy=MomentumPolicy(momentum_policy),
                reason=reason,
            )
            self._absorb(outcome)

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
            outcome = self.sync.submit(gradient)
            if self.monitor is not None:
                outcome.merge(self.monitor.after_gradient(self.sync, gradient))
            self._absorb(outcome)
            if worker in outcome.released:
                return self._reply()
            event, slot = threading.Event(), []
            self._waiters[worker] = (event, slot)
        event.wait()
        return slot[0]

    def switch_to(self, protocol: str, reason: str) -> None:
        """An out-of-schedule switch, decided by a policy outside the server."""
        with self._lock:
            self._absorb(self.sync.switch_to(ProtocolSpec.parse(protocol), reason))

    def drain(self) -> dict:
        """Everything recorded since the last drain, for the coordinator to write and act on."""
        with self._lock:
            out = {
                "applied": self._applied,
                "dropped": self._dropped,
                "switches": self._switches,
                "evaluations": self._evaluations,
                "straggler_events": self._straggler_events,
                "decisions": self._decisions,
                "snapshots": self._snapshots,
                "state": self.state(),
            }
            self._applied, self._dropped, self._switches, self._evaluations = [], [], [], []
            self._straggler_events, self._decisions, self._snapshots = [], [], []
        return out

    def state(self) -> dict:
        sync = self.sync
        now = time.time()
        return {
            "version": sync.version,
            "samples": sync.samples,
            "progress": sync.progress,
            "protocol": sync.spec.name,
            "done": sync.done,
            "time_s": sync.now_s(),
            "time_by_protocol": dict(sync.time_by_protocol),
            "samples_by_protocol": dict(sync.samples_by_protocol),
            "excluded": sorted(sync.excluded),
            "quarantined": sorted(sync.quarantine.quarantined),
            "accounting": sync.accounting(),
            "online": self.monitor.state() if self.monitor else None,
            "pinned": sync.pinned.name if sync.pinned else None,
            "lr_scale": sync.lr_scale,
            "momentum_policy": sync.momentum_policy.value,
            # Seconds since each worker last called, for those not held here (a worker held at
            # a barrier is waiting on us, not hung).
            "silent_s": {
                w: round(now - t, 3) for w, t in self._last_heard.items() if w not in self._waiters
            },
        }

    # -- internals --------------------------------------------------------------------------

    def _absorb(self, outcome: Outcome) -> None:
        self._applied.extend(outcome.applied)
        self._dropped.extend(outcome.dropped)
        self._switches.extend(outcome.switches)
        self._straggler_events.extend(outcome.straggler_events)
        self._decisions.extend(outcome.decisions)
        self._snapshots.extend(outcome.snapshots)
        for point in outcome.evaluations:
            # Copy now: the weights change in place with the next update.
            self._evaluations.append((point, self.sync.weights.numpy().copy()))
        if outcome.released:
            reply = self._reply()
            for worker in outcome.released:
                waiter = self._waiters.pop(worker, None)
                if waiter is not None:
                    event, slot = waiter
                    slot.append(reply)
                    event.set()

    def _reply(self) -> WeightsReply:
        sync = self.sync
        snap = self._snapshot
        if snap is None or snap.version != sync.version or snap.done != sync.done:
            weights = sync.weights.numpy().copy()
            payload: np.ndarray | list = weights
            if weights.nbytes > _SHARED_WEIGHTS_BYTES:
                payload = [ray.put(weights)]
            snap = WeightsReply(sync.version, payload, sync.done, sync.progress)
            self._snapshot = snap
        return snap
