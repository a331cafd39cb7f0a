"""A scripted runtime for the run controller: real server shards, fake workers, virtual time.

It does what the Ray runtime does, in one process and in lockstep rounds of `STEP_S` virtual
seconds: each live worker computes a gradient of a quadratic loss on the weights it last
pulled and pushes its slices to every shard; shards are drained after every round and the
controller's decisions are carried out at once. A script (progress -> action) kills workers,
hangs them, kills the servers, slows a worker down or makes the loss blow up, so every path of
the controller runs in milliseconds without Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from syncswitch.config import TrainConfig
from syncswitch.control.controller import (
    CHECKPOINT_DIR,
    RunController,
    RunPhase,
    Step,
    resume_point,
)
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
from syncswitch.control.dispatch import DecisionDispatch, Handler
from syncswitch.control.plan import RunPlan
from syncswitch.control.run_state import run_checkpoint
from syncswitch.control.shard import ServerShard
from syncswitch.core.reliability.checkpoints import CheckpointStore, LoadedCheckpoint
from syncswitch.core.sync.records import Gradient, WorkerStats
from syncswitch.core.sync.sharding import parameter_shards
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.rundir import RunWriter

STEP_S = 0.02
PARAMETERS = 12
TRAIN_SAMPLES = 320
TARGET = np.linspace(-1.0, 1.0, PARAMETERS).astype(np.float32)


class Stopped(Exception):
    """The controller decided to stop the run."""


@dataclass
class FakeWorker:
    index: int
    alive: bool = True
    running: bool = False  # its training loop is on
    hung: bool = False
    waiting: bool = False  # held by a shard (barrier or bound)
    sequence: int = 0
    versions: list[int] = field(default_factory=list)
    weights: np.ndarray = field(default_factory=lambda: np.zeros(PARAMETERS, np.float32))
    last_heard_s: float = 0.0
    steps: int = 0
    incarnation: int = 0


Action = Callable[["ScriptedRun"], None]


class ScriptedRun:
    def __init__(
        self,
        tmp: Path,
        *,
        script: dict[float, Action] | None = None,
        resume: bool = False,
        **job: object,
    ) -> None:
        values: dict = dict(
            workers=4,
            servers=2,
            batch_size=8,
            epochs=4.0,
            lr=0.2,
            lr_schedule="constant",
            eval_every=0.25,
            checkpoint_every=0.1,
            progress=False,
            out=str(tmp),
        )
        values.update(job)
        self.config = TrainConfig(**values)
        self.plan = RunPlan.resolve(self.config, TRAIN_SAMPLES)
        self.now_s = 0.0
        self.script = dict(sorted((script or {}).items()))
        self.slow: dict[int, float] = {}  # worker -> step-time factor
        self.loss_offset = 0.0  # added to every reported loss (a scripted divergence)
        self.steps: list[Step] = []  # every step the controller returned, in order
        resumed: LoadedCheckpoint | None = None
        if resume:
            resumed = CheckpointStore(tmp / CHECKPOINT_DIR).load_latest()
        self.writer = RunWriter(
            tmp,
            self.config.to_plain(),
            self.plan.emulation.describe(),
            resume_at=resume_point(resumed),
        )
        self.controller = RunController(
            self.plan, self.writer, resumed_from=resumed, clock=lambda: self.now_s
        )
        self.slices = parameter_shards(PARAMETERS, self.config.servers)
        restore = run_checkpoint(resumed).servers if resumed else None
        self.shards = self._new_shards(restore)
        self.workers = [FakeWorker(w) for w in range(self.config.workers)]
        self.summary: dict | None = None
        self.dispatch = DecisionDispatch(self._handlers(), on_step=self.steps.append)

    # -- driving --------------------------------------------------------------------------------

    def run(self, max_rounds: int = 20_000, stop_at: float | None = None) -> ScriptedRun:
        """Drive the run to its end (or until progress reaches `stop_at`, as a killed driver)."""
        for shard in self.shards:
            shard.begin()
        self.handle(self.controller.start(PARAMETERS, setup_s=0.0))
        for _ in range(max_rounds):
            if self.controller.phase is RunPhase.FINISHING:
                break
            if stop_at is not None and self.progress >= stop_at:
                self.writer.close()
                return self
            self._play_script()
            self._round()
            self.now_s += STEP_S
            self.handle(
                self.controller.on_drained([s.drain(self._silent_s()) for s in self.shards])
            )
            self._check_workers()
            self.handle(self.controller.on_tick())
        else:
            raise AssertionError(f"no end after {max_rounds} rounds: {self.controller.phase}")
        self.summary = self.controller.finish(
            [s.final_snapshot() for s in self.shards],
            [WorkerStats.of_steps(w.index, [STEP_S] * w.steps, [], []) for w in self.workers],
            np.concatenate([s.sync.optimizer.weights.numpy() for s in self.shards]),
        )
        self.writer.close()
        return self

    def handle(self, step: Step) -> None:
        """Carry out a step's decisions (and any step a handler gets back), recording each."""
        self.dispatch(step)

    @property
    def progress(self) -> float:
        return self.shards[0].sync.progress

    # -- scripted events ------------------------------------------------------------------------

    def kill_worker(self, index: int) -> None:
        worker = self.workers[index]
        worker.alive = worker.running = worker.waiting = False

    def hang_worker(self, index: int) -> None:
        self.workers[index].hung = True

    def kill_servers(self) -> None:
        self.handle(self.controller.on_server_died("parameter server died: scripted"))

    # -- internals ------------------------------------------------------------------------------

    def _new_shards(self, restore: tuple[SynchronizerState, ...] | None) -> list[ServerShard]:
        initial = np.zeros(PARAMETERS, np.float32)
        return [
            ServerShard(
                self.plan.sync,
                initial[part],
                restore=restore[i] if restore else None,
                observe_steps=i == 0 and self.plan.stragglers is not None,
                clock=lambda: self.now_s,
            )
            for i, part in enumerate(self.slices)
        ]

    def _play_script(self) -> None:
        while self.script and self.progress >= next(iter(self.script)):
            at = next(iter(self.script))
            self.script.pop(at)(self)

    def _round(self) -> None:
        for worker in self.workers:
            if not (worker.alive and worker.running) or worker.hung or worker.waiting:
                continue
            distance = worker.weights - TARGET
            values = torch.from_numpy(distance + 0.01 * np.sin(worker.steps + worker.index))
            loss = float(0.5 * (distance**2).sum()) + self.loss_offset
            step_s = STEP_S * self.slow.get(worker.index, 1.0) * (1 + 0.01 * worker.index)
            worker.last_heard_s = self.now_s
            released_by_all = True
            done = False
            for shard, part, version in zip(self.shards, self.slices, worker.versions, strict=True):
                gradient = Gradient(
                    worker=worker.index,
                    sequence=worker.sequence,
                    computed_version=version,
                    values=values[part].clone(),
                    samples=self.config.batch_size,
                    loss=loss,
                    step_time_s=step_s,
                )
                outcome = shard.submit(gradient)
                released_by_all &= worker.index in outcome.released
                done |= shard.sync.live.done
            worker.sequence += 1
            worker.steps += 1
            worker.waiting = not released_by_all
            if not worker.waiting:
                self._pull(worker)
        # Released workers pull the newest weights (a barrier releases everyone at once).
        for worker in self.workers:
            if worker.waiting and all(worker.index not in s.sync.room.waiting for s in self.shards):
                worker.waiting = False
                self._pull(worker)

    def _pull(self, worker: FakeWorker) -> None:
        worker.last_heard_s = self.now_s  # a released worker was waiting on us, not silent
        worker.versions = [s.sync.live.version for s in self.shards]
        worker.weights = np.concatenate([s.sync.optimizer.weights.numpy() for s in self.shards])

    def _check_workers(self) -> None:
        for worker in self.workers:
            if (
                not worker.alive
                and worker.running is False
                and worker.index
                not in (
                    self.controller.workers.restarting | self.controller.workers.finished.keys()
                )
                and worker.index in self.controller.workers.running
            ):
                self.handle(self.controller.on_worker_died(worker.index, "ScriptedKill"))
            elif (
                worker.running and not worker.waiting and any(s.sync.live.done for s in self.shards)
            ):
                worker.running = False
                self.handle(
                    self.controller.on_worker_finished(
                        worker.index, WorkerStats.of_steps(worker.index, [], [], [])
                    )
                )

    def _silent_s(self) -> dict[int, float]:
        return {
            w.index: round(self.now_s - w.last_heard_s, 3)
            for w in self.workers
            if w.alive and w.running and not w.waiting
        }

    # -- carrying out decisions -------------------------------------------------------------

    def _handlers(self) -> dict[type, Handler]:
        return {
            StartWorker: self._start_worker,
            Evaluate: self._evaluate,
            ApplyPolicyDecision: lambda d: self._on_shards(lambda s: s.carry_out(d.decision)),
            FinishShards: lambda _: self._on_shards(ServerShard.finish),
            RequestSnapshot: lambda d: self._on_shards(lambda s: s.request_snapshot(d.label)),
            RestartWorker: self._restart_worker,
            KillWorker: lambda d: self.kill_worker(d.worker),
            RestoreServers: self._restore_servers,
            RollBack: self._roll_back,
            Stop: self._stop,
        }

    def _on_shards(self, action: Callable[[ServerShard], object]) -> None:
        for shard in self.shards:
            action(shard)

    def _start_worker(self, decision: StartWorker) -> None:
        worker = self.workers[decision.worker]
        worker.alive = worker.running = True
        worker.hung = worker.waiting = False
        worker.incarnation = decision.incarnation
        worker.sequence = max(s.rejoin(decision.worker) for s in self.shards)
        worker.last_heard_s = self.now_s
        self._pull(worker)

    def _evaluate(self, decision: Evaluate) -> Step:
        distance = float(np.linalg.norm(decision.weights - TARGET))
        values = {"accuracy": 1 / (1 + distance), "loss": distance}
        return self.controller.on_evaluated(decision.point, values)

    def _restart_worker(self, decision: RestartWorker) -> Step:
        for shard in self.shards:
            shard.worker_lost(decision.worker)
        self.workers[decision.worker].alive = True  # the runtime brings it back up ...
        return self.controller.on_worker_ready(decision.worker)  # ... and says so

    def _restore_servers(self, decision: RestoreServers) -> Step:
        for worker in self.workers:
            if worker.running:
                worker.running = worker.waiting = False
        self.shards = self._new_shards(decision.shard_states)
        for shard in self.shards:
            shard.begin()
        return self.controller.on_servers_restored()

    def _roll_back(self, order: RollBack) -> Step:
        for shard, state in zip(self.shards, order.shard_states, strict=True):
            shard.roll_back(state, order.protocol, order.lr_scale, order.momentum, order.label)
        self.loss_offset = 0.0  # the restored weights train normally again
        return self.controller.on_rolled_back()

    def _stop(self, stop: Stop) -> None:
        self.writer.close()
        raise Stopped(stop.reason)
