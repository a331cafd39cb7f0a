"""The Ray runtime: starts the actors, drives the run controller, carries out its decisions.

Everything about what happens in a run, and when, is the controller's (syncswitch/control).
This module only moves data and processes: every `_POLL_S` it drains the server shards and
hands the reports to the controller, submits the evaluations it asks for, watches the
workers' runs (finished, dead, up again after a restart), and carries out each decision with
Ray: restart or kill a worker, replace or roll back the servers, apply a policy decision on
every shard, request a snapshot.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import torch
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

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
    RunDecision,
    StartWorker,
    Stop,
)
from syncswitch.control.plan import RunPlan
from syncswitch.core.checkpoint import LoadedCheckpoint
from syncswitch.core.optimizer import flatten_parameters
from syncswitch.core.records import EvalPoint
from syncswitch.core.sharding import parameter_shards
from syncswitch.errors import TrainingStalled
from syncswitch.files import write_json_atomic
from syncswitch.runtime.evaluator import Evaluator
from syncswitch.runtime.progress import ProgressDisplay
from syncswitch.runtime.ray.resources import ResourcePlan
from syncswitch.runtime.ray.server import ParameterServer
from syncswitch.runtime.ray.worker import Worker, WorkerSpec, join_replies
from syncswitch.workloads import ArrayDataset

_POLL_S = 0.1
_STARTUP_TIMEOUT_S = 300.0


class RaySupervisor:
    def __init__(
        self,
        controller: RunController,
        dataset: ArrayDataset,
        model_factory: Callable[[], torch.nn.Module],
        loss_fn: Callable,
        resources: ResourcePlan,
        *,
        progress: bool,
    ) -> None:
        self.controller = controller
        self.plan: RunPlan = controller.plan
        self.dataset = dataset
        self.model_factory = model_factory
        self.loss_fn = loss_fn
        self.resources = resources
        self.progress = progress
        self.servers: list = []
        self.workers: list = []
        self.evaluator: Any = None
        self._runs: dict[Any, int] = {}  # a worker's `run` call -> the worker
        self._restarting: dict[int, Any] = {}  # worker -> its `ready` call while Ray restarts it
        self._evaluations: dict[Any, EvalPoint] = {}
        self._pids: dict[str, Any] = {"driver": os.getpid()}

    # -- the run ------------------------------------------------------------------------------

    def execute(self) -> tuple[dict[str, Any], np.ndarray]:
        """Run to the end; the summary and the final flat weights."""
        setup_started = time.perf_counter()
        torch.manual_seed(self.plan.job.seed)
        initial = flatten_parameters(self.model_factory()).numpy()
        self.shards = parameter_shards(len(initial), self.plan.job.servers)
        self.initial = initial
        self.dataset_ref = ray.put(self.dataset)
        resumed = self.controller.resumed_from
        try:
            self.servers = self._start_servers(resumed.state["servers"] if resumed else None)
            self.evaluator = (
                ray.remote(Evaluator)
                .options(**self.resources.evaluator.actor_options())
                .remote(
                    self.dataset_ref,
                    self.model_factory,
                    self.loss_fn,
                    self.resources.evaluator.threads,
                )
            )
            self.workers = [self._start_worker(i) for i in range(self.plan.workers)]
            pids = _wait_ready([w.ready.remote() for w in self.workers])
            _wait_ready([self.evaluator.ready.remote()])
            self._pids["workers"] = dict(enumerate(pids))
            self._write_pids()
            ray.get([s.begin.remote() for s in self.servers])
            # Stragglers timed in seconds count run time, which a resumed run carries over.
            self.started_at = time.time() - (_resumed_time_s(resumed) if resumed else 0.0)
            self._carry_out(
                self.controller.start(len(initial), time.perf_counter() - setup_started)
            )
            with ProgressDisplay(self.progress, self.plan.total_samples) as show:
                self._follow(show)
            return self._finish()
        except BaseException as error:
            self.controller.fail(error)
            raise
        finally:
            for actor in [*self.servers, self.evaluator, *self.workers]:
                if actor is not None:
                    ray.kill(actor, no_restart=True)

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

    def _finish(self) -> tuple[dict[str, Any], np.ndarray]:
        finished = self.controller.workers.finished
        worker_stats = [finished[i] for i in sorted(finished)]
        _, final_weights, _, _ = join_replies(ray.get([s.pull.remote(-1) for s in self.servers]))
        snapshots = ray.get([s.final_snapshot.remote() for s in self.servers])
        return self.controller.finish(snapshots, worker_stats, final_weights), final_weights

    # -- carrying out decisions -----------------------------------------------------------------

    def _carry_out(self, step: Step) -> None:
        for decision in step.decisions:
            self._do(decision)

    def _do(self, decision: RunDecision) -> None:
        match decision:
            case StartWorker(worker=worker, incarnation=incarnation):
                run = self.workers[worker].run.remote(
                    self.started_at, self.servers, [self.dataset_ref], incarnation
                )
                self._runs[run] = worker
            case Evaluate(point=point, weights=weights):
                self._evaluations[self.evaluator.evaluate.remote(weights)] = point
            case ApplyPolicyDecision(decision=policy_decision):
                ray.get([s.carry_out.remote(policy_decision) for s in self.servers])
            case FinishShards():
                ray.get([s.finish.remote() for s in self.servers])
            case RequestSnapshot(label=label):
                for server in self.servers:
                    server.request_snapshot.remote(label)
            case RestartWorker(worker=worker):
                ray.get([s.worker_lost.remote(worker) for s in self.servers])
                # Ray is restarting the actor; a call made before it is up again fails, so its
                # run starts once `ready` answers (see _check_restarts).
                self._restarting[worker] = self.workers[worker].ready.remote()
            case KillWorker(worker=worker):
                # Ray restarts it; its failed run is then handled like any dead worker's.
                ray.kill(self.workers[worker], no_restart=False)
            case RestoreServers(shard_states=states):
                self._replace_servers(states)
                self._carry_out(self.controller.on_servers_restored())
            case RollBack() as rollback:
                ray.get(
                    [
                        server.roll_back.remote(
                            state,
                            rollback.protocol,
                            rollback.lr_scale,
                            rollback.momentum,
                            rollback.label,
                        )
                        for server, state in zip(self.servers, rollback.shard_states, strict=True)
                    ]
                )
                self._carry_out(self.controller.on_rolled_back())
            case Stop(reason=reason, stalled=stalled):
                raise TrainingStalled(reason) if stalled else RuntimeError(reason)

    def _replace_servers(self, shard_states: list[dict]) -> None:
        for server in self.servers:
            ray.kill(server, no_restart=True)
        # Every worker run must end (they fail on their next call to the dead server) before
        # the workers get the new servers: a worker handles one call at a time.
        if self._runs:
            ray.wait(list(self._runs), num_returns=len(self._runs), timeout=_STARTUP_TIMEOUT_S)
            for ref, worker in list(self._runs.items()):
                # A failed run runs again once the servers are back.
                with contextlib.suppress(RayTaskError, RayActorError, GetTimeoutError):
                    self.controller.on_worker_finished(worker, ray.get(ref, timeout=0))
            self._runs.clear()
        self.servers = self._start_servers(shard_states)
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
            point = self._evaluations.pop(ref)
            accuracy, loss = ray.get(ref)
            self._carry_out(self.controller.on_evaluated(point, accuracy, loss))

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
                # The worker's own code raised: a failed call to a server, or a real error.
                if not isinstance(error.cause, RayActorError):
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
                pid = ray.get(ref)
            except ActorUnavailableError:
                self._restarting[worker] = self.workers[worker].ready.remote()  # not up yet
                continue
            del self._restarting[worker]
            self._pids["workers"][worker] = pid
            self._write_pids()
            self._carry_out(self.controller.on_worker_ready(worker))

    # -- starting actors ------------------------------------------------------------------------

    def _start_servers(self, restore: list[dict] | None) -> list:
        role = self.resources.server
        server_cls = ray.remote(ParameterServer).options(
            **role.actor_options(), max_concurrency=4 * self.plan.workers + 16
        )
        servers = [
            server_cls.remote(
                self.plan.sync,
                self.initial[shard],
                self.plan.job.weight_decay,
                restore=restore[index] if restore else None,
                # The first shard reports arriving steps: the online policy decides on them.
                observe_steps=index == 0 and self.plan.online is not None,
                threads=role.threads,
            )
            for index, shard in enumerate(self.shards)
        ]
        self._pids["servers"] = _wait_ready([s.pid.remote() for s in servers])
        return servers

    def _start_worker(self, index: int) -> Any:
        plan = self.plan
        spec = WorkerSpec(
            worker=index,
            workers=plan.workers,
            batch_size=plan.job.batch_size,
            seed=plan.job.seed,
            emulation=plan.emulation,
            model_factory=self.model_factory,
            loss_fn=self.loss_fn,
            shards=tuple(self.shards),
            faults=plan.faults.for_worker(index),
            threads=self.resources.worker.threads,
        )
        # Restartable: after a crash Ray starts the actor again with the same arguments.
        options = {
            **self.resources.worker.actor_options(),
            "max_restarts": plan.reliability.max_worker_restarts,
        }
        return ray.remote(Worker).options(**options).remote(spec)

    def _write_pids(self) -> None:
        """actors.json: which process is which, for operators (and fault-injection tests)."""
        write_json_atomic(self.controller.writer.dir / "actors.json", self._pids)


def _resumed_time_s(checkpoint: LoadedCheckpoint) -> float:
    return float(checkpoint.state["servers"][0]["time_s"])


def _wait_ready(refs: list) -> list:
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=_STARTUP_TIMEOUT_S)
    if pending:
        raise RuntimeError(
            f"{len(pending)} actor(s) did not start within {_STARTUP_TIMEOUT_S:.0f} s: the Ray "
            "cluster may lack the CPUs they request (see `ray status`)"
        )
    return ray.get(refs)
