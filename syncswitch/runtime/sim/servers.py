"""The server shards of a simulated run and the links to and from them.

A gradient pushed by a worker reaches its shard after its link and the server's CPU; a
released worker's reply reaches it after the link back (sim/paths.py times both), and is
handed to `deliver`, the worker's side of the runtime. Servers that are replaced start a new
life: messages sent to the old ones are lost with them, as on Ray.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from syncswitch.control.plan import RunPlan
from syncswitch.control.shard import ServerShard
from syncswitch.core.cluster.model import ClusterModel
from syncswitch.core.sync.records import Gradient, Outcome
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.core.sync.wire_dtype import round_trip
from syncswitch.runtime import shards
from syncswitch.runtime.replies import Reply, ReplyCache
from syncswitch.runtime.sim.engine import EventQueue
from syncswitch.runtime.sim.paths import SimPaths
from syncswitch.runtime.sim.worker import SimWorker
from syncswitch.runtime.step import Computed

# A reply delivered to a worker: (worker, its life when sent, shard, reply).
Deliver = Callable[[int, int, int, Reply], None]


class SimServers:
    """The shards (rebuilt on a restore), their replies, and the messages between them and
    the workers."""

    def __init__(
        self,
        plan: RunPlan,
        cluster: ClusterModel,
        events: EventQueue,
        paths: SimPaths,
        initial: np.ndarray,
        slices: list[slice],
        workers: list[SimWorker],
        deliver: Deliver,
    ) -> None:
        self.plan = plan
        self.cluster = cluster
        self.events = events
        self.paths = paths
        self.initial = initial
        self.slices = slices
        self.workers = workers
        self._deliver = deliver
        self.shards: list[ServerShard] = []
        self.life = 0  # bumped when the servers are replaced: older messages are lost
        self._replies: list[ReplyCache] = []

    def on_all(self, action: shards.ShardAction) -> None:
        for index, shard in enumerate(self.shards):
            self.released(action(shard), index)

    def on_each(self, actions: list[shards.ShardAction]) -> None:
        """One action per shard, in shard order."""
        for index, (shard, action) in enumerate(zip(self.shards, actions, strict=True)):
            self.released(action(shard), index)

    def start(self, restore: tuple[SynchronizerState, ...] | None) -> None:
        self.life += 1
        specs = shards.shard_specs(self.plan, self.initial, self.slices, restore)
        self.shards = [spec.build(clock=self._now) for spec in specs]
        for shard in self.shards:
            shard.begin()
        self.paths.reset(len(self.shards))
        self._replies = [ReplyCache() for _ in self.shards]

    def _now(self) -> float:
        return self.events.now_s

    def reply(self, index: int) -> Reply:
        """A shard's reply (runtime/replies.py); its progress and local round as of now, where
        Ray's are as of the version's first reply."""
        sync = self.shards[index].sync
        reply = self._replies[index].current(sync)
        return reply._replace(progress=sync.progress, local=sync.local_round())

    def released(self, outcome: Outcome, index: int) -> None:
        """Released workers get the weights (over links), other shards its norm partials."""
        for norm in outcome.norm_partials:
            for other, shard in enumerate(self.shards):
                if other != index:
                    self.released(shard.norm_arrived(norm), other)
        if not outcome.released:
            return
        now = self.events.now_s
        reply = self.reply(index)
        for worker_index in outcome.released:
            worker = self.workers[worker_index]
            worker.last_heard_s = now  # held until now, it was waiting on us, not silent
            if not worker.running:
                continue
            self.send_reply(worker, index, reply, now)

    def send_reply(self, worker: SimWorker, shard_index: int, reply: Reply, ready_s: float) -> None:
        arrives_s = self.paths.reply_arrives_s(worker.index, shard_index, ready_s)
        self.events.at(arrives_s, self._deliver, worker.index, worker.life, shard_index, reply)

    # -- gradients to the servers -------------------------------------------------------------

    def push(
        self,
        index: int,
        life: int,
        sequence: int,
        versions: list[int],
        step: Computed,
        step_s: float,
        due_s: float,
    ) -> None:
        worker = self.workers[index]
        if life != worker.life:
            return
        now = self.events.now_s
        worker.last_heard_s = now
        gradient, local_steps = step.gradient, step.steps
        batch = self.plan.job.batch_size * max(local_steps, 1)
        overlap, wire_dtype = self.cluster.compute.sends_during_step, self.plan.sync.wire_dtype
        for shard_index, (part, version) in enumerate(zip(self.slices, versions, strict=True)):
            # Over the links to the server, then its CPU.
            on_link = self.paths.gradient_on_server_s(index, shard_index, now)
            message = Gradient(
                worker=index,
                sequence=sequence,
                computed_version=version,
                # Rounded as the data plane rounds it (its replies are, in ReplyCache).
                values=torch.from_numpy(round_trip(gradient[part], wire_dtype)),
                samples=batch,
                loss=step.loss,
                step_time_s=step_s,
                local_steps=local_steps,
                norm=step.norm,
            )
            if self.paths.serve_later:
                held = overlap and self.cluster.server.applies_after_step
                ready = max(on_link, due_s) if held else on_link
                self.events.at(ready, self._handle, shard_index, self.life, message, due_s)
                continue
            applied_at = self.paths.applied_s(shard_index, on_link)
            if overlap:
                applied_at = max(applied_at, due_s)
            self.events.at(applied_at, self._arrive, shard_index, self.life, message)

    def _handle(self, shard_index: int, server_life: int, message: Gradient, due_s: float) -> None:
        """The server's CPU takes a gradient that is ready now: after the ones before it, on
        a core of its node."""
        if server_life != self.life:
            return  # sent to servers that have since been replaced: lost with them
        apply_s = self.paths.apply_s[shard_index]
        applied_at = self.paths.server_cpu(shard_index, self.events.now_s, apply_s)
        if self.cluster.compute.sends_during_step:
            applied_at = max(applied_at, due_s)
        self.events.at(applied_at, self._arrive, shard_index, server_life, message)

    def _arrive(self, shard_index: int, server_life: int, message: Gradient) -> None:
        if server_life != self.life:
            return  # sent to servers that have since been replaced: lost with them
        worker = self.workers[message.worker]
        worker.last_heard_s = self.events.now_s
        if self.cluster.host_cpu.driver_ms and self.cluster.nodes.contended:
            # The driver's share of each gradient (its drain, the run's rows) takes a core.
            self.paths.driver_cpu(self.events.now_s, self.cluster.host_cpu.driver_ms)
        self.released(self.shards[shard_index].submit(message), shard_index)
