"""The simulator runtime: the run controller driven by a discrete-event loop on a virtual clock.

It does what the Ray supervisor does (runtime/ray/supervisor.py) with the same core objects,
in one process: `ServerShard`s hold the parameters, every `POLL_S` of simulated time they are
drained into the controller, and the controller's decisions are carried out at once. What a
Ray run spends in real processes and sleeps, the cluster model (core/cluster/model.py) says here.

One worker step, as events:

    start_step  the worker has every shard's reply: its step (runtime/step.py, as on Ray) is
                taken now, a real gradient on the weights it pulled (the one shared model),
                and its step time drawn as on Ray
    push        step_s later: each slice leaves over the worker's link, queues for the
                server's link and then for the server's CPU (sim/paths.py times them) ...
    arrive      ... and is submitted to the shard when the server has applied it; the shard
                releases workers (at once in ASP, at the barrier in BSP)
    receive     each released worker's weights slice comes back the same way; with all of
                them in, its next step starts

The workers' side (start_step, receive) is this module's; the servers' side and the links
between them (push, arrive, a released worker's reply) are SimServers' (sim/servers.py).

In a local-H phase (core/sync/local.py) a reply carries the worker's round: start_step runs H real
steps of the worker's own SGD, push sends one delta (a gradient's size) after H step times.

Stale events (from before a worker died or the servers were replaced) carry the `life` they
were made in and are ignored, as Ray ignores a dead process's messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from syncswitch.control.controller import RunController, RunPhase, Step
from syncswitch.control.decisions import (
    ApplyPolicyDecision,
    Evaluate,
    FinishShards,
    KillWorker,
    RequestSnapshot,
    RestartWorker,
    RestoreServers,
    RollBack,
    StartWorker,
    Stop,
)
from syncswitch.control.dispatch import DecisionDispatch, Handler, raise_stop
from syncswitch.control.run_state import run_checkpoint
from syncswitch.control.shard import ServerShard
from syncswitch.core.cluster.model import ClusterModel
from syncswitch.core.reliability.faults import FaultKind
from syncswitch.core.sync.optimizer import flatten_parameters
from syncswitch.core.sync.sharding import parameter_shards
from syncswitch.rundir import Summary
from syncswitch.runtime import shards
from syncswitch.runtime.evaluator import Evaluator
from syncswitch.runtime.progress import ProgressDisplay
from syncswitch.runtime.replies import Reply, join_replies
from syncswitch.runtime.sim.engine import EventQueue
from syncswitch.runtime.sim.gradients import GradientComputer
from syncswitch.runtime.sim.paths import SimPaths
from syncswitch.runtime.sim.servers import SimServers
from syncswitch.runtime.sim.worker import SimWorker
from syncswitch.runtime.step import WorkerStep
from syncswitch.workloads.data import JobData
from syncswitch.workloads.task import Task

POLL_S = 0.1  # simulated seconds between drains, as the Ray supervisor polls
_DISPLAY_EVERY_S = 0.5  # host seconds between progress display updates


class SimRuntime:
    def __init__(
        self,
        controller: RunController,
        data: JobData,
        model_factory: Callable[[], torch.nn.Module],
        task: Task,
        cluster: ClusterModel,
        events: EventQueue,
        *,
        progress: bool,
    ) -> None:
        self.controller = controller
        self.plan = controller.plan
        self.cluster = cluster
        self.data = data
        self.model_factory = model_factory
        self.task = task
        self.progress = progress
        self.events = events  # the controller's clock reads it too
        plan = self.plan
        steps = [
            WorkerStep(w, plan.emulation, plan.faults.for_worker(w), plan.sync.optimizer)
            for w in range(plan.workers)
        ]
        self.workers = [SimWorker(w, step) for w, step in enumerate(steps)]
        self.computer = GradientComputer.of(plan, data, model_factory, task.loss_fn)
        self.evaluator = Evaluator(data, model_factory, task)
        self._first_steps_at = 0.0
        self._carry_out = DecisionDispatch(self._handlers())

    # -- the run ------------------------------------------------------------------------------

    def execute(self) -> tuple[Summary, np.ndarray]:
        setup_started = time.perf_counter()
        torch.manual_seed(self.plan.job.seed)
        initial = flatten_parameters(self.model_factory()).numpy()
        self.slices = parameter_shards(len(initial), self.plan.job.servers)
        self.initial = initial
        self.paths = SimPaths.of_plan(self.plan, self.cluster, self.slices)
        self.servers = SimServers(
            self.plan,
            self.cluster,
            self.events,
            self.paths,
            initial,
            self.slices,
            self.workers,
            deliver=self._receive,
        )
        resumed = self.controller.resumed_from
        try:
            restore = run_checkpoint(resumed).servers if resumed else None
            self.servers.start(restore)
            self._first_steps_at = self.events.now_s + self.cluster.startup_s
            self._carry_out(
                self.controller.start(len(initial), time.perf_counter() - setup_started)
            )
            self.events.at(self.events.now_s + POLL_S, self._poll)
            with ProgressDisplay(
                self.progress, self.plan.total_samples, simulated=True, metric=self.plan.metric
            ) as show:
                self._follow(show)
            return self._finish()
        except BaseException as error:
            self.controller.fail(error)
            raise

    def _follow(self, show: ProgressDisplay) -> None:
        shown_at = time.perf_counter()
        while self.controller.phase is not RunPhase.FINISHING:
            if not self.events.run_next():
                raise RuntimeError("simulation has no events left before the run finished")
            if time.perf_counter() - shown_at > _DISPLAY_EVERY_S:
                shown_at = time.perf_counter()
                record = self.controller.record
                show.update(self.controller.state, record.metrics[-1] if record.metrics else None)
        show.finish(self.controller.state, self.controller.record.final_metric())

    def _finish(self) -> tuple[Summary, np.ndarray]:
        finished = self.controller.workers.finished
        stats = [finished[i] for i in sorted(finished)]
        servers = self.servers.shards
        weights = np.concatenate([s.sync.optimizer.weights.numpy() for s in servers])
        snapshots = [s.final_snapshot() for s in servers]
        return self.controller.finish(snapshots, stats, weights), weights

    # -- the controller -----------------------------------------------------------------------

    def _poll(self) -> None:
        controller = self.controller
        now = self.events.now_s
        reports = [shard.drain(self._silent_s(shard, now)) for shard in self.servers.shards]
        self._carry_out(controller.on_drained(reports))
        self._carry_out(controller.on_tick())
        if controller.phase is not RunPhase.FINISHING:
            self.events.at(now + POLL_S, self._poll)

    def _silent_s(self, shard: ServerShard, now: float) -> dict[int, float]:
        waiting = shard.sync.room.waiting
        return {
            w.index: round(now - w.last_heard_s, 3)
            for w in self.workers
            if w.running and w.index not in waiting
        }

    def _handlers(self) -> dict[type, Handler]:
        """How each decision is carried out here: in place, at once."""
        return {
            StartWorker: lambda d: self._start_worker(d.worker, d.incarnation),
            Evaluate: self._evaluate,
            ApplyPolicyDecision: lambda d: self.servers.on_all(shards.carry_out(d.decision)),
            FinishShards: lambda _: self.servers.on_all(shards.finish()),
            RequestSnapshot: self._request_snapshot,
            RestartWorker: self._restart_worker,
            KillWorker: self._kill_hung,
            RestoreServers: self._restore_servers,
            RollBack: self._roll_back,
            Stop: raise_stop,
        }

    def _evaluate(self, decision: Evaluate) -> Step:
        if self.cluster.host_cpu.evaluator_ms:
            # Not on anyone's path, but it takes a core of its node meanwhile.
            self.paths.driver_cpu(self.events.now_s, self.cluster.host_cpu.evaluator_ms)
        values = self.evaluator.evaluate(decision.weights)
        return self.controller.on_evaluated(decision.point, values)

    def _request_snapshot(self, decision: RequestSnapshot) -> None:
        for shard in self.servers.shards:
            shard.request_snapshot(decision.label)

    def _restart_worker(self, decision: RestartWorker) -> None:
        index = decision.worker
        self.servers.on_all(shards.worker_lost(index))
        # The process comes back after the cluster's restart time.
        self.events.at(self.events.now_s + self.cluster.restart_s, self._worker_up, index)

    def _kill_hung(self, decision: KillWorker) -> Step:
        self._kill(decision.worker)
        return self.controller.on_worker_died(decision.worker, "killed: hung")

    def _restore_servers(self, decision: RestoreServers) -> Step:
        for worker in self.workers:
            worker.running = False
            worker.life += 1
        self.servers.start(decision.shard_states)
        return self.controller.on_servers_restored()

    def _roll_back(self, order: RollBack) -> Step:
        self.servers.on_each(shards.roll_back(order))
        return self.controller.on_rolled_back()

    def _worker_up(self, index: int) -> None:
        if self.controller.phase is RunPhase.TRAINING:
            self._carry_out(self.controller.on_worker_ready(index))

    # -- workers ------------------------------------------------------------------------------

    def _start_worker(self, index: int, incarnation: int) -> None:
        worker = self.workers[index]
        new_process = incarnation != worker.incarnation or not worker.step_times
        worker.running, worker.hung = True, False
        worker.life += 1
        worker.incarnation = incarnation
        servers = self.servers
        worker.sequence = max(s.rejoin(index) for s in servers.shards)
        batches = max(s.data_position(index) for s in servers.shards)
        self.computer.position(index, worker.sequence, new_process=new_process, batches=batches)
        worker.step.start(incarnation, new_process=new_process)
        worker.last_heard_s = self.events.now_s
        worker.replies = {}
        # The workers' first steps wait for the cluster's start-up time.
        ready_s = max(self.events.now_s, self._first_steps_at)
        for shard_index in range(len(servers.shards)):
            servers.send_reply(worker, shard_index, servers.reply(shard_index), ready_s)

    def _receive(self, index: int, life: int, shard_index: int, reply: Reply) -> None:
        worker = self.workers[index]
        if life != worker.life or not worker.running:
            return
        worker.replies[shard_index] = reply
        if len(worker.replies) == len(self.servers.shards):
            self._start_step(worker)

    def _start_step(self, worker: SimWorker) -> None:
        now = self.events.now_s
        replies = [worker.replies[i] for i in range(len(self.servers.shards))]
        worker.replies = {}
        if worker.step_times:
            # Since the last step's compute ended: the push, the server, the barrier, the pull.
            worker.wait_times.append(now - worker.step_started_s - worker.step_s)
        pulled = join_replies(replies)
        if pulled.done:
            worker.running = False
            self._carry_out(self.controller.on_worker_finished(worker.index, worker.stats()))
            return
        index = worker.index
        step = worker.step.compute(
            pulled.weights,
            pulled.local,
            pulled.progress,
            lambda w: self.computer.gradient(index, w),
        )
        if step.ends is FaultKind.CRASH:
            self._kill(index)
            self._carry_out(self.controller.on_worker_died(index, "injected crash"))
            return
        if step.ends is FaultKind.HANG:
            worker.hung = True  # alive and silent: the controller's hang check finds it
            worker.life += 1
            return
        # Stragglers timed in seconds count run time, which a resumed run carries over.
        run_s = self.servers.shards[0].sync.now_s()
        step_times = self.computer.step_times(index)
        times = worker.step.simulated_times_s(step_times, step.steps, pulled.progress, run_s)
        step_s = sum(times)
        started_s, computed_s = self.paths.worker_cpu(index, now, step.steps)
        worker.step_started_s, worker.step_s = started_s, step_s
        worker.step_times.extend(times)
        # Normally the gradient leaves when the step ends; with `sends_during_step` (an
        # emulated device time, as on Ray with --step-time-ms) it leaves once computed and
        # counts as arrived when the step's time is up, so its transfer (and, unless the
        # server applies after the step, its handling) overlaps the step.
        overlap = self.cluster.compute.sends_during_step
        self.events.at(
            computed_s if overlap else max(started_s + step_s, computed_s),
            self.servers.push,
            worker.index,
            worker.life,
            worker.sequence,
            pulled.versions,
            step,
            step_s,
            started_s + step_s,
        )
        worker.sequence += 1

    def _kill(self, index: int) -> None:
        worker = self.workers[index]
        worker.running = False
        worker.life += 1
