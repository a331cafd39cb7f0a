"""The run controller: the story of one training run, told as a state machine.

    STARTING --start--> TRAINING --workload done, workers back--> FINISHING --finish--> FINISHED
                          |   ^
      a server died ------+   +------ on_servers_restored   (RECOVERING in between)
      divergence ---------+   +------ on_rolled_back        (ROLLING_BACK in between)
                          |
      nothing can go on --+--> FAILED (every worker quarantined, a worker failing too often,
                                       a dead server with no checkpoint; or `fail` on error)

The phases and every allowed move between them are a table (control/phases.py); a move not in
it raises. Protocol switches are not phases: the synchronizer in every server shard puts a
scheduled switch in force in place, at a version boundary, and reports it; a straggler
policy's switch, or online timing's, is decided here and carried out the same way. Nothing
stops for either.

A runtime (Ray actors, or a simulator) drives it. It starts the actors, then calls the `on_*`
method for everything that happens: shards drained (`on_drained`), an evaluation back, a
worker's run ended, died or is up again, a server died, a recovery done, a clock tick. Each
call returns a `Step`: the phase before and after, and the decisions (syncswitch.control.
decisions) the runtime must carry out, in order (control/dispatch.py runs them). The
controller writes the run directory and, through its collaborators, the checkpoints; it never
touches a process. Time comes from the injected clock.

Beside it, each in its own module: `EvaluationAssembly` (weight slices -> evaluations ->
metrics in training order), `CheckpointKeeper` (snapshots -> checkpoints, timed ones),
`HealthChecks` (dead, hung and quarantined workers), `DivergenceWatch` (losses -> rollback),
`RunJournal` (the first shard's updates, drops and switches, and every decision -> the run
record and the run directory), `StragglerResponse` (step times -> the straggler monitor ->
exclude, readmit, switch), `OnlineTiming` (the shards' gradient statistics or the test
losses -> when an online phase ends), `BestKeeper` (evaluations -> the best weights) and
`CallbackRunner` (evaluations, switches, checkpoints -> the callbacks, early stopping among
them -> a stop asked for).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncswitch.control.best import BestKeeper, save_weights
from syncswitch.control.callback_runner import CallbackRunner
from syncswitch.control.checkpoints import CHECKPOINT_DIR, CheckpointKeeper
from syncswitch.control.decisions import (
    FinishShards,
    RequestSnapshot,
    RestoreServers,
    RunDecision,
    StartWorker,
    Stop,
)
from syncswitch.control.divergence import DivergenceWatch
from syncswitch.control.early_stopping import builtin_callbacks
from syncswitch.control.evaluations import EvaluationAssembly
from syncswitch.control.health import HealthChecks, WorkerBook
from syncswitch.control.journal import RunJournal, announce
from syncswitch.control.phases import PhaseEvent, PhaseMachine, RunPhase, Step
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.control.resume_check import say_refused
from syncswitch.control.run_state import run_checkpoint
from syncswitch.control.shard import ShardReport, ShardState
from syncswitch.control.stragglers import StragglerResponse
from syncswitch.control.summary import build_summary, staleness_rules_of, traffic_of
from syncswitch.control.timing import OnlineTiming
from syncswitch.core.reliability.checkpoints import CheckpointError, LoadedCheckpoint
from syncswitch.core.sync.records import EvalPoint, Snapshot, WorkerStats
from syncswitch.errors import ConfigError, DiskFull
from syncswitch.files import name_too_long
from syncswitch.records.failures import ServerFailure
from syncswitch.rundir import RunWriter, Summary, events, names

__all__ = ["CHECKPOINT_DIR", "RunController", "RunPhase", "Step", "resume_point", "run_dir_in_use"]


class RunController:
    def __init__(
        self,
        plan: RunPlan,
        writer: RunWriter,
        *,
        resumed_from: LoadedCheckpoint | None = None,
        schedule_source: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        host_clock: Callable[[], float] = time.perf_counter,
        weights_state: Callable[[np.ndarray], dict[str, torch.Tensor]] | None = None,
        test_metrics: Callable[[np.ndarray], dict[str, float] | None] | None = None,
        memory: dict[str, Any] | None = None,
        callbacks: CallbackRunner | None = None,
    ) -> None:
        """`clock` is the run's time (a simulator's is virtual); `host_clock` is real time,
        for the host seconds the run took. `weights_state` turns the final flat weights into
        what final_weights.pt holds: train() gives the model's state_dict; without it (a
        scripted run, which has no model) the flat vector is kept as {"flat_weights": ...}.
        `test_metrics` measures the final weights on the test split (None: it has none).
        `memory`: what the processes hold for the model (control/memory.py), for the summary.
        `callbacks`: the user's (train()'s `callbacks=`); the config's are added here."""
        self.plan = plan
        self.writer = writer
        self.resumed_from = resumed_from
        self.schedule_source = schedule_source or {"kind": "given"}
        self.host_clock = host_clock
        self.weights_state = weights_state or flat_weights_state
        self.test_metrics = test_metrics
        self.memory = memory
        self._host_started = host_clock()
        self._phases = PhaseMachine()
        self.state = ShardState()  # the first shard's, as of the last drain
        self.traffic: dict[str, Any] = {}  # every shard's received traffic (summary.py)
        self.staleness_rules = staleness_rules_of(plan, [])  # the rules, memory once drained
        self.record = RunRecord()
        if resumed_from is not None:
            self.record = run_checkpoint(resumed_from).record
            self.record.metrics = [
                m for m in self.record.metrics if m.samples <= resumed_from.info.samples
            ]
            # A row the checkpoint holds but metrics.csv lost (cut by a full disk) is written
            # again: the resumed run does not evaluate that point twice.
            writer.restore_metrics([m.to_plain() for m in self.record.metrics])
        # The best evaluation's weights (best_weights.pt, best.py).
        save_best = partial(save_weights, writer.dir / names.BEST_WEIGHTS, self.weights_state)
        self.best = BestKeeper(self.record, plan, save_best, resumed_from)
        self.callbacks = callbacks or CallbackRunner()
        self.callbacks.install(builtin_callbacks(plan), plan.metric)
        self.journal = RunJournal(self.record, writer, self.callbacks.switched)
        log_decision = self.journal.log_decision
        self.evaluations = EvaluationAssembly(plan.metric.split)
        self.checkpoints = CheckpointKeeper(
            writer,
            self.record,
            every_s=plan.reliability.checkpoint_every_s,
            clock=clock,
            total_samples=plan.total_samples,
            on_written=self.callbacks.checkpointed,
        )
        self.health = HealthChecks(plan, writer, self.record)
        self.divergence = DivergenceWatch(plan, self.record, self.checkpoints, log_decision)
        self.stragglers = StragglerResponse(plan, self.record, writer, log_decision)
        self.timing = (
            OnlineTiming(
                plan.timing,
                self.record.timing,
                writer,
                plan.schedule.phases[plan.schedule.online_index + 1].spec,
                log_decision,
            )
            if plan.timing is not None and plan.schedule.online_index is not None
            else None
        )
        self.setup_s = 0.0
        self._workload_done = False  # some shard has applied the whole workload
        self.placement: dict[str, Any] | None = None  # the runtime's word on where actors run

    @property
    def phase(self) -> RunPhase:
        return self._phases.phase

    @property
    def workers(self) -> WorkerBook:
        return self.health.workers

    # -- the run's story, in the order it happens ----------------------------------------------

    def start(self, parameters: int, setup_s: float) -> Step:
        """The actors are up: log the start (or the resume) and start every worker."""
        before = self.phase
        self.setup_s = setup_s
        announce(self.writer, self.plan, self.record, self.resumed_from, parameters)
        self._phases.fire(PhaseEvent.START)
        self.callbacks.started(
            self.plan.total_samples, bool(self.resumed_from), self.record.metrics
        )
        self.workers.running = set(range(self.plan.workers))
        starts = [
            StartWorker(w, incarnation=0, reason="run started") for w in range(self.plan.workers)
        ]
        return Step(before, self.phase, list(starts))

    def on_drained(self, reports: list[ShardReport]) -> Step:
        """What every shard recorded since the last drain (shard 0 speaks for the run)."""
        before, decisions = self.phase, []
        first = reports[0]
        self.state = first.state
        self.traffic = traffic_of([r.state for r in reports])
        self.staleness_rules = staleness_rules_of(self.plan, [r.state for r in reports])
        if not self._workload_done and any(report.state.done for report in reports):
            self._workload_done = True
            decisions += finish_the_other_shards(reports)
        self.journal.shard_outcome(first)
        decisions += self.evaluations.add(reports, self.record.take_train_loss)
        decisions += self.stragglers.react(first)
        if self.timing is not None and self.phase is RunPhase.TRAINING:
            decisions += self.timing.react(reports, self.state)
        # The guard reads the losses before this drain's snapshots are written: a snapshot
        # taken after the loss went bad must not push the last good checkpoint out of the
        # store (it keeps two) before the rollback can load it.
        verdict = self.divergence.watch(first) if self.phase is RunPhase.TRAINING else None
        healthy = None if verdict is None else self.divergence.healthy_samples(verdict)
        unwritten = self.evaluations.first_unreleased_samples
        self.checkpoints.collect(reports, max_samples=healthy, hold_from=unwritten)
        self.best.checkpointed()  # best_weights.pt beside each checkpoint (best.py)
        if verdict is not None:
            rollback = self.divergence.respond(verdict, self.state)
            if rollback is not None:
                self._phases.fire(PhaseEvent.DIVERGED)
                decisions.append(rollback)
        stalled = self.health.stalled(self.state)
        if stalled is not None:
            decisions += self._stop(stalled).decisions
        decisions += self.health.hung(self.state)
        decisions += self._maybe_finishing(take_stop=True)
        return Step(before, self.phase, decisions)

    def on_evaluated(self, point: EvalPoint, values: dict[str, float]) -> Step:
        """An evaluation is back (the measures of the split decisions read, the primary
        metric first); metrics are written in training order, whatever the order in which
        evaluations come back."""
        before, decisions = self.phase, list[RunDecision]()
        for evaluated in self.evaluations.result(point, values):
            row = evaluated.metric_row()
            if self.timing is not None:
                self.timing.add_loss(float(row.fraction), float(row.loss))
            self.record.metrics.append(row)
            self.best.observe(evaluated, evaluated.weights)
            self.writer.metric(row.to_plain())
            self.callbacks.evaluated(row)
            self.writer.summary(self.summary([], status="running"))
        self.checkpoints.release(self.evaluations.first_unreleased_samples)
        decisions += self._maybe_finishing(take_stop=True)
        return Step(before, self.phase, decisions)

    def on_worker_finished(self, worker: int, stats: WorkerStats) -> Step:
        before = self.phase
        self.workers.running.discard(worker)
        self.workers.finished[worker] = stats
        self._maybe_finishing()
        return Step(before, self.phase)

    def on_worker_died(self, worker: int, cause: str) -> Step:
        """A worker's process is gone: restart it, unless it has failed too often."""
        before = self.phase
        decision = self.health.worker_died(worker, cause, self.state)
        if isinstance(decision, Stop):
            return self._stop(decision)
        return Step(before, self.phase, [decision])

    def on_worker_ready(self, worker: int) -> Step:
        """A restarted worker is up again: it trains on from the current version."""
        before = self.phase
        self.workers.restarting.discard(worker)
        if self.phase is RunPhase.RECOVERING:
            return Step(before, self.phase)  # started with the others once servers are back
        self.workers.running.add(worker)
        incarnation = self.workers.restarts[worker]
        return Step(before, self.phase, [StartWorker(worker, incarnation, "restarted")])

    def on_server_died(self, reason: str) -> Step:
        """Replace every shard by one restored from the last good checkpoint."""
        before = self.phase
        try:
            loaded = self.checkpoints.load_latest()
        except CheckpointError as error:
            return self._stop(
                Stop(f"{reason}, and there is no checkpoint to recover from: {error}")
            )
        if loaded.refused:
            say_refused(loaded, "restoring the parameter servers")
        self._phases.fire(PhaseEvent.SERVERS_LOST)
        # Slices and snapshots that only some shards had sent belong to the lost timeline.
        self.evaluations.forget_slices()
        self.checkpoints.forget_snapshots()
        failure = ServerFailure(
            reason=reason,
            at_fraction=round(self.state.progress, 6),
            recovery=f"restored from {loaded.info.path.name}",
            checkpoint_samples=loaded.info.samples,
            samples_lost=max(self.state.samples - loaded.info.samples, 0),
            refused_checkpoints=tuple(f"{r.path.name}: {r.reason}" for r in loaded.refused),
        )
        self.record.failures.append(failure)
        self.writer.event(events.ServerFailed(failure))
        servers = run_checkpoint(loaded).servers
        restore = RestoreServers(servers, loaded.info.path.name, reason)
        return Step(before, self.phase, [restore])

    def on_servers_restored(self) -> Step:
        """New shards are up: every worker that had not finished trains on against them."""
        before = self.phase
        self._phases.fire(PhaseEvent.SERVERS_RESTORED)
        book = self.workers
        rerun = book.unfinished(self.plan.workers)
        book.running = set(rerun)
        starts = [StartWorker(w, book.restarts[w], "servers restored") for w in rerun]
        return Step(before, self.phase, list(starts))

    def on_rolled_back(self) -> Step:
        """Every shard is back at the checkpoint: log the rollback and watch afresh."""
        before = self.phase
        self.divergence.rolled_back()
        self._phases.fire(PhaseEvent.ROLLED_BACK)
        return Step(before, self.phase)

    def on_placed(self, placement: dict[str, Any]) -> Step:
        """Where the actors run now, as the runtime describes it (nodes, hosts, devices):
        kept for the summary, and logged whenever it changes (a restart on another node)."""
        if placement != self.placement:
            self.placement = placement
            self.writer.event(events.Placement(placement))
        return Step(self.phase, self.phase)

    def on_tick(self) -> Step:
        """Time passed: a checkpoint may be due by time."""
        if self.phase is not RunPhase.TRAINING or not self.checkpoints.timed_due():
            return Step(self.phase, self.phase)
        every_s = self.checkpoints.every_s
        request = RequestSnapshot("timed", f"{every_s:g} s since the last checkpoint")
        return Step(self.phase, self.phase, [request])

    @property
    def evaluations_outstanding(self) -> int:
        return self.evaluations.outstanding

    def finish(
        self,
        final_snapshots: list[Snapshot],
        worker_stats: list[WorkerStats],
        final_weights: np.ndarray,
    ) -> Summary:
        """The last checkpoint, worker statistics, final weights and summary."""
        assert self.phase is RunPhase.FINISHING and not self.evaluations.outstanding, self.phase
        rows = [stats.to_plain() for stats in worker_stats]
        self.writer.worker_stats(rows)
        self.checkpoints.release(None)
        self.checkpoints.write(final_snapshots)
        if self.test_metrics is not None:
            self.record.test = self.test_metrics(final_weights)
        summary = self.summary(worker_stats, status="complete")
        self.writer.summary(summary)
        self.best.flush()
        save_weights(self.writer.dir / names.FINAL_WEIGHTS, self.weights_state, final_weights)
        self._phases.fire(PhaseEvent.FINISH)
        self.callbacks.ended(summary)
        return summary

    def fail(self, error: BaseException) -> None:
        """Whatever was produced stays on disk; the summary says how the run ended."""
        self._phases.fire(PhaseEvent.FAIL)
        # The disk that stopped the run may have no room for this either; the error the caller
        # raises says why the run ended, and the checkpoint is where it resumes.
        with suppress(OSError, DiskFull):
            self.writer.summary(self.summary([], status=f"failed: {error!r}"))

    def summary(self, worker_stats: list[WorkerStats], status: str) -> Summary:
        return build_summary(
            self.plan,
            self.record,
            self.state,
            schedule_source=self.schedule_source,
            run_dir=self.writer.dir,
            setup_s=self.setup_s if status == "complete" else 0.0,
            host_s=self.host_clock() - self._host_started,
            worker_stats=worker_stats,
            status=status,
            placement=self.placement,
            traffic=self.traffic or None,
            staleness_rules=self.staleness_rules,
            memory=self.memory,
        )

    # -- bookkeeping ----------------------------------------------------------------------------

    def _maybe_finishing(self, take_stop: bool = False) -> list[RunDecision]:
        """With `take_stop` (where the callbacks are told of the run's records), a callback's
        stop (early stopping's too) ends the workload as a shard that applied it all does:
        once, and never after the workload is done. The run is finishing once the workload is
        done, every worker is back and every evaluation slice is in."""
        decisions = list[RunDecision]()
        reason = self.callbacks.take_stop() if take_stop else None
        if reason is not None and not self._workload_done:
            self._workload_done, self.record.stopped_early = True, reason
            decisions.append(FinishShards(reason))
        book = self.workers
        if (
            self.phase is RunPhase.TRAINING
            and self._workload_done
            and not book.running
            and not book.restarting
            # Every shard's last evaluation slice is in (one ended later than another).
            and not self.evaluations.slices_waiting
        ):
            self._phases.fire(PhaseEvent.WORKLOAD_DONE)
        return decisions

    def _stop(self, stop: Stop) -> Step:
        before = self.phase
        self._phases.fire(PhaseEvent.STOP)
        return Step(before, self.phase, [stop])


def finish_the_other_shards(reports: list[ShardReport]) -> list[RunDecision]:
    """The workload is done once any shard has applied it (`reports` has at least one that
    says so): workers stop on the first shard that does, and the others must not hold them at
    a barrier."""
    done = [report.state.done for report in reports]
    if all(done):
        return []
    return [FinishShards(f"shard {done.index(True)} has applied the whole workload")]


def resume_point(checkpoint: LoadedCheckpoint | None) -> tuple[int, float] | None:
    """(samples, run seconds) a resumed run continues from, or None for a new run."""
    if checkpoint is None:
        return None
    state = run_checkpoint(checkpoint)
    return state.samples, state.time_s


def run_dir_in_use(run_dir: Path) -> list[str]:
    """What of an earlier run a directory holds (a new run must not write into it); a path
    no file system can hold is one ConfigError line."""
    problem = name_too_long(run_dir, "--out")
    if problem:
        raise ConfigError(problem)
    return [n for n in names.RUN_MARKERS if os.path.lexists(run_dir / n)]


def flat_weights_state(final_weights: np.ndarray) -> dict[str, torch.Tensor]:
    """final_weights.pt's form for a run without a model: the flat parameter vector."""
    return {"flat_weights": torch.tensor(final_weights)}
