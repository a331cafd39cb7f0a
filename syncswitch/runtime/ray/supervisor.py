"""The Ray runtime: starts the actors, drives the run controller, carries out its decisions.

Everything about what happens in a run, and when, is the controller's (syncswitch/control).
This module only moves data and processes: every `_POLL_S` it drains the server shards and
hands the reports to the controller, submits the evaluations it asks for, watches the
workers' runs (finished, dead, up again after a restart), and carries out each decision with
Ray: restart or kill a worker, replace or roll back the servers, apply a policy decision on
every shard, request a snapshot.

Every actor starts in its own bundle of the run's placement group (runtime/ray/placement.py
owns the group, runtime/ray/starter.py builds each actor), on the device the resource plan
gives its role; where each one runs is kept in actors.json and handed to the controller for
the summary. A lost node is no special case: its workers die and restart (in their
bundles, which Ray places again on the nodes left), its servers are restored from the last
checkpoint, its evaluator is started again and given the evaluations it had not answered.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import ray
import torch
from ray.exceptions import (
    ActorUnavailableError,
    GetTimeoutError,
    ObjectLostError,
    RayActorError,
    RayTaskError,
)

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
from syncswitch.control.plan import RunPlan
from syncswitch.control.run_state import run_checkpoint
from syncswitch.control.shard import ServerShard
from syncswitch.core.reliability.checkpoints import LoadedCheckpoint
from syncswitch.core.sync.optimizer import flatten_parameters
from syncswitch.core.sync.records import EvalPoint
from syncswitch.core.sync.sharding import parameter_shards
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.rundir import Summary, names
from syncswitch.runtime import shards
from syncswitch.runtime.progress import ProgressDisplay, starting, startup_elapsed_s
from syncswitch.runtime.ray.actors import STARTUP_TIMEOUT_S, ActorDirectory, wait_ready
from syncswitch.runtime.ray.placement import RunPlacement, object_nodes
from syncswitch.runtime.ray.resources import ResourcePlan
from syncswitch.runtime.ray.starter import ActorStarter
from syncswitch.runtime.replies import join_replies
from syncswitch.workloads.data import JobData
from syncswitch.workloads.task import Task

_POLL_S = 0.1


class RaySupervisor:
    def __init__(
        self,
        controller: RunController,
        data: JobData,
        model_factory: Callable[[], torch.nn.Module],
        task: Task,
        resources: ResourcePlan,
        *,
        progress: bool,
    ) -> None:
        self.controller = controller
        self.plan: RunPlan = controller.plan
        self.data = data
        self.model_factory = model_factory
        self.task = task
        self.resources = resources
        self.progress = progress
        self.servers: list = []
        self.workers: list = []
        self.evaluator: Any = None
        self._runs: dict[Any, int] = {}  # a worker's `run` call -> the worker
        self._restarting: dict[int, Any] = {}  # worker -> its `ready` call while Ray restarts it
        # An evaluation's call -> its point and weights (kept to ask a new evaluator again).
        self._evaluations: dict[Any, tuple[EvalPoint, np.ndarray]] = {}
        self.actors = ActorDirectory(controller.writer.dir / names.ACTORS, resources)
        self.placement: RunPlacement | None = None
        self._carry_out = DecisionDispatch(self._handlers())

    # -- the run ------------------------------------------------------------------------------

    def execute(self) -> tuple[Summary, np.ndarray]:
        """Run to the end; the summary and the final flat weights."""
        setup_started = time.monotonic()
        torch.manual_seed(self.plan.job.seed)
        initial = flatten_parameters(self.model_factory()).numpy()
        self.shards = parameter_shards(len(initial), self.plan.job.servers)
        # Put once: each node's object store then fetches it once and its workers share
        # that copy, rather than every worker pulling its own through the driver. A dataset
        # factory travels as itself: each worker builds its own data.
        self.dataset_ref = ray.put(self.data)
        resumed = self.controller.resumed_from
        try:
            starting("reserving the actors' CPUs (a placement group)")
            self.placement = RunPlacement(
                self.resources, self.plan.workers, self.plan.job.servers, STARTUP_TIMEOUT_S
            )
            self.start = ActorStarter(
                self.plan,
                self.resources,
                self.placement,
                self.actors,
                self.model_factory,
                self.task,
                self.dataset_ref,
                initial,
                self.shards,
            )
            restore = run_checkpoint(resumed).servers if resumed else None
            # Each step waits for processes to start (Python, the PyTorch import, the model,
            # the dataset): most of start-up (docs/performance.md, "Start-up"). Starting the
            # servers and workers side by side gained nothing on 2 cores: the imports are CPU.
            starting(f"starting {len(self.shards)} server process(es)")
            self.servers = self.start.servers(restore)
            self.evaluator = self.start.evaluator()
            self.workers = [self.start.worker(i) for i in range(self.plan.workers)]
            starting(f"starting {self.plan.workers} worker processes and the evaluator")
            located = wait_ready([w.ready.remote() for w in self.workers])
            self.actors.pids["workers"] = {}
            for index, where in enumerate(located):
                self.actors.locate(f"worker {index}", where)
            self.actors.locate("evaluator", wait_ready([self.evaluator.ready.remote()])[0])
            self._write_pids()
            starting("connecting the workers to the servers")
            ray.get([s.begin.remote() for s in self.servers])
            # Stragglers timed in seconds count run time, which a resumed run carries over.
            self.started_at = time.time() - (_resumed_time_s(resumed) if resumed else 0.0)
            self._carry_out(self.controller.start(len(initial), startup_elapsed_s(setup_started)))
            with ProgressDisplay(
                self.progress, self.plan.total_samples, metric=self.plan.metric
            ) as show:
                self._follow(show)
            return self._finish()
        except BaseException as error:
            self.controller.fail(error)
            raise
        finally:
            for actor in [*self.servers, self.evaluator, *self.workers]:
                if actor is not None:
                    ray.kill(actor, no_restart=True)
            if self.placement is not None:
                self.placement.release()

    def _follow(self, show: ProgressDisplay) -> None:
        controller = self.controller
        while controller.phase is not RunPhase.FINISHING:
            time.sleep(_POLL_S)
            try:
                reports = ray.get([s.drain.remote() for s in self.servers])
            except RayActorError as error:
                self._carry_out(
                    controller.on_server_died(f"parameter server died: {type(error).__name__}")
                )
                continue
            self._carry_out(controller.on_drained(reports))
            self._collect_evaluations(block=False)
            last = controller.record.metrics[-1] if controller.record.metrics else None
            show.update(controller.state, last)
            self._check_runs()
            self._check_restarts()
            self._carry_out(controller.on_tick())
        while controller.evaluations_outstanding:
            self._collect_evaluations(block=True)
        show.finish(controller.state, controller.record.final_metric())

    def _finish(self) -> tuple[Summary, np.ndarray]:
        finished = self.controller.workers.finished
        worker_stats = [finished[i] for i in sorted(finished)]
        final_weights = join_replies(
            ray.get([s.pull.remote(-1) for s in self.servers]), ray.get
        ).weights
        snapshots = ray.get([s.ask.remote(ServerShard.final_snapshot) for s in self.servers])
        self.actors.dataset_copies = object_nodes(self.dataset_ref)
        for rejected in ray.get([s.rejected_messages.remote() for s in self.servers]):
            for reason, count in rejected.items():
                self.actors.rejected[reason] = self.actors.rejected.get(reason, 0) + count
        self.actors.count_shared_memory(ray.get([s.shared_memory.remote() for s in self.servers]))
        self._write_pids()
        return self.controller.finish(snapshots, worker_stats, final_weights), final_weights

    # -- carrying out decisions -----------------------------------------------------------------

    def _handlers(self) -> dict[type, Handler]:
        """How each decision is carried out with Ray."""
        return {
            StartWorker: self._start_run,
            Evaluate: self._evaluate,
            ApplyPolicyDecision: lambda d: self._on_all(shards.carry_out(d.decision)),
            FinishShards: lambda _: self._on_all(shards.finish()),
            RequestSnapshot: self._request_snapshot,
            RestartWorker: self._restart_worker,
            # Ray restarts it; its failed run is then handled like any dead worker's.
            KillWorker: lambda d: ray.kill(self.workers[d.worker], no_restart=False),
            RestoreServers: self._restore_servers,
            RollBack: self._roll_back,
            Stop: raise_stop,
        }

    def _on_all(self, action: shards.ShardAction) -> None:
        """Carry the action out on every shard and wait for all of them."""
        ray.get([server.act.remote(action) for server in self.servers])

    def _request_snapshot(self, decision: RequestSnapshot) -> None:
        for server in self.servers:
            # At its next version boundary.
            server.ask.remote(partial(ServerShard.request_snapshot, label=decision.label))

    def _start_run(self, decision: StartWorker) -> None:
        run = self.workers[decision.worker].run.remote(
            self.started_at, self.servers, [self.dataset_ref], decision.incarnation
        )
        self._runs[run] = decision.worker

    def _evaluate(self, decision: Evaluate) -> None:
        call = self.evaluator.evaluate.remote(decision.weights)
        self._evaluations[call] = (decision.point, decision.weights)

    def _restart_worker(self, decision: RestartWorker) -> None:
        # A server may be gone too (a lost node takes every actor on it): the next drain
        # reports it, and the restored servers know no old incarnation.
        with contextlib.suppress(RayActorError):
            self._on_all(shards.worker_lost(decision.worker))
        # Ray is restarting the actor; a call made before it is up again fails, so its run
        # starts once `ready` answers (see _check_restarts).
        self._restarting[decision.worker] = self.workers[decision.worker].ready.remote()

    def _restore_servers(self, decision: RestoreServers) -> Step:
        self._replace_servers(decision.shard_states)
        return self.controller.on_servers_restored()

    def _roll_back(self, order: RollBack) -> Step:
        actions = shards.roll_back(order)
        ray.get([s.act.remote(a) for s, a in zip(self.servers, actions, strict=True)])
        return self.controller.on_rolled_back()

    def _replace_servers(self, shard_states: tuple[SynchronizerState, ...]) -> None:
        for server in self.servers:
            ray.kill(server, no_restart=True)
        # Every worker run must end (they fail on their next call to the dead server) before
        # the workers get the new servers: a worker handles one call at a time.
        if self._runs:
            ray.wait(list(self._runs), num_returns=len(self._runs), timeout=STARTUP_TIMEOUT_S)
            runs = list(self._runs.items())
            self._runs.clear()
            for ref, worker in runs:
                try:
                    stats = ray.get(ref, timeout=0)
                except (RayTaskError, GetTimeoutError):
                    continue  # failed on a dead server: it runs again once they are back
                except RayActorError as error:
                    # The worker died with the servers (a lost node takes all its actors):
                    # Ray restarts it, and it runs once it is up and the servers are back.
                    self._carry_out(self.controller.on_worker_died(worker, type(error).__name__))
                    continue
                self.controller.on_worker_finished(worker, stats)
        self.servers = self.start.servers(shard_states)
        ray.get([s.begin.remote() for s in self.servers])
        self._write_pids()

    # -- watching the actors --------------------------------------------------------------------

    def _collect_evaluations(self, block: bool) -> None:
        if not self._evaluations:
            return
        refs = list(self._evaluations)
        ready, _ = ray.wait(
            refs, num_returns=1 if block else len(refs), timeout=None if block else 0
        )
        for ref in ready:
            point, weights = self._evaluations.pop(ref)
            try:
                values = ray.get(ref)
            except RayActorError:
                # The evaluator died (its node was lost): a new one answers instead.
                self._evaluations[ref] = (point, weights)
                self._replace_evaluator()
                return
            self._carry_out(self.controller.on_evaluated(point, values))

    def _check_runs(self) -> None:
        """Collect finished worker runs; a dead worker or a dead server is reported."""
        if not self._runs:
            return
        ready, _ = ray.wait(list(self._runs), num_returns=len(self._runs), timeout=0)
        server_died = False
        for ref in ready:
            worker = self._runs.pop(ref)
            try:
                stats = ray.get(ref)
            except RayTaskError as error:
                # The worker's own code raised: a failed call to a server (or a weights object
                # that died with its server), or a real error.
                if not isinstance(error.cause, RayActorError | ObjectLostError):
                    raise
                server_died = True  # the worker is fine; it runs again after the recovery
                continue
            except RayActorError as error:
                self._carry_out(self.controller.on_worker_died(worker, type(error).__name__))
                continue
            self._carry_out(self.controller.on_worker_finished(worker, stats))
        if server_died:
            self._carry_out(
                self.controller.on_server_died("parameter server died (seen by a worker)")
            )

    def _check_restarts(self) -> None:
        if not self._restarting:
            return
        refs = list(self._restarting.values())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for worker, ref in list(self._restarting.items()):
            if ref not in ready:
                continue
            try:
                where = ray.get(ref)
            except ActorUnavailableError:
                self._restarting[worker] = self.workers[worker].ready.remote()  # not up yet
                continue
            del self._restarting[worker]
            self.actors.locate(f"worker {worker}", where)
            self._write_pids()
            self._carry_out(self.controller.on_worker_ready(worker))

    # -- replacing actors -----------------------------------------------------------------------

    def _replace_evaluator(self) -> None:
        """A new evaluator (in the lost one's bundle) takes every unanswered evaluation."""
        with contextlib.suppress(Exception):
            ray.kill(self.evaluator, no_restart=True)
        self.evaluator = self.start.evaluator()
        self.actors.locate("evaluator", wait_ready([self.evaluator.ready.remote()])[0])
        self._write_pids()
        waiting = list(self._evaluations.values())
        self._evaluations = {
            self.evaluator.evaluate.remote(weights): (point, weights) for point, weights in waiting
        }

    def _write_pids(self) -> None:
        self._carry_out(self.controller.on_placed(self.actors.write()))


def _resumed_time_s(checkpoint: LoadedCheckpoint) -> float:
    return run_checkpoint(checkpoint).time_s
