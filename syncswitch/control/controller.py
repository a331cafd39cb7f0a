"""The run controller: the story of one training run, told as a state machine.

    STARTING --start--> TRAINING --workload done, workers back--> FINISHING --finish--> FINISHED
                          |   ^
      a server died ------+   +------ on_servers_restored   (RECOVERING in between)
      divergence ---------+   +------ on_rolled_back        (ROLLING_BACK in between)
                          |
      nothing can go on --+--> FAILED (every worker quarantined, a worker failing too often,
                                       a dead server with no checkpoint; or `fail` on error)

Protocol switches are not states: the synchronizer in every server shard puts a scheduled
switch in force in place, at a version boundary, and reports it; an online policy's switch is
decided here and carried out the same way. Nothing stops for either.

A runtime (Ray actors, or a simulator) drives it. It starts the actors, then calls the `on_*`
method for everything that happens: shards drained (`on_drained`), an evaluation back, a
worker's run ended, died or is up again, a server died, a recovery done, a clock tick. Each
call returns a `Step`: the phase before and after, and the decisions (syncswitch.control.
decisions) the runtime must carry out, in order. The controller itself writes the run
directory and the checkpoints; it never touches a process. Time comes from the injected clock.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
from syncswitch.control.record import RunRecord
from syncswitch.control.resume_check import say_refused
from syncswitch.control.run_state import RunCheckpoint, run_checkpoint
from syncswitch.control.shard import ShardReport, ShardState
from syncswitch.control.summary import build_summary
from syncswitch.core.checkpoint import CheckpointError, CheckpointStore, LoadedCheckpoint
from syncswitch.core.divergence import (
    Divergence,
    DivergenceGuard,
    GiveUp,
    GuardConfig,
    rollback_decision,
)
from syncswitch.core.online import OnlineMonitor
from syncswitch.core.policies import Action
from syncswitch.core.protocol import ASP, ProtocolSpec
from syncswitch.core.records import Decision, EvalPoint, Snapshot, WorkerStats
from syncswitch.files import write_atomic
from syncswitch.results import RunWriter


class RunPhase(StrEnum):
    STARTING = "starting"  # actors starting; nothing trains yet
    TRAINING = "training"
    RECOVERING = "recovering"  # server shards being replaced from a checkpoint
    ROLLING_BACK = "rolling_back"  # shards going back to a checkpoint in place (divergence)
    FINISHING = "finishing"  # workload done, every worker back; evaluations outstanding
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Step:
    before: RunPhase
    after: RunPhase
    decisions: list[RunDecision] = field(default_factory=list)


@dataclass
class PolicyView:
    """The run as an online policy may read it (core.policies.RunView), as last seen here."""

    spec: ProtocolSpec = ASP
    scheduled_spec: ProtocolSpec = ASP
    excluded: frozenset[int] = frozenset()
    done: bool = False
    pinned: ProtocolSpec | None = None

    def follow(self, state: ShardState) -> None:
        self.spec = state.protocol or ASP
        self.scheduled_spec = state.scheduled_protocol or ASP
        self.excluded = frozenset(state.excluded)
        self.done = state.done
        self.pinned = state.pinned

    def assume(self, decision: Decision) -> None:
        """A decision just made is in force for the next one (shards carry it out next)."""
        action = decision.action
        if action is Action.EXCLUDE:
            self.excluded |= {decision.worker}
        elif action is Action.READMIT:
            self.excluded -= {decision.worker}
        elif decision.protocol is not None:
            self.spec = decision.protocol


@dataclass
class WorkerBook:
    """Where each worker's training loop stands."""

    running: set[int] = field(default_factory=set)
    restarting: set[int] = field(default_factory=set)  # dead, until the runtime has it up again
    finished: dict[int, WorkerStats] = field(default_factory=dict)
    restarts: Counter[int] = field(default_factory=Counter)
    hung: set[int] = field(default_factory=set)  # killed as hung, until heard from again


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
    ) -> None:
        """`clock` is the run's time (a simulator's is virtual); `host_clock` is real time,
        for the host seconds the run took."""
        self.plan = plan
        self.writer = writer
        self.store = CheckpointStore(writer.dir / CHECKPOINT_DIR)
        self.resumed_from = resumed_from
        self.schedule_source = schedule_source or {"kind": "given"}
        self.clock = clock
        self.host_clock = host_clock
        self._host_started = host_clock()
        self.phase = RunPhase.STARTING
        self.state = ShardState()  # the first shard's, as of the last drain
        self.workers = WorkerBook()
        self.record = RunRecord()
        if resumed_from is not None:
            self.record = run_checkpoint(resumed_from).record
            self.record.metrics = [
                m for m in self.record.metrics if m["samples"] <= resumed_from.info.samples
            ]
        self.guard = (
            DivergenceGuard(GuardConfig(), initial_level=self.record.guard_initial_level)
            if plan.reliability.divergence_guard
            else None
        )
        self.monitor = (
            OnlineMonitor(
                plan.workers,
                plan.online,
                plan.emulation.stragglers if plan.emulation.enabled else None,
            )
            if plan.online is not None
            else None
        )
        self.policy_view = PolicyView()
        self.setup_s = 0.0
        self._eval_slices: list[list[tuple[EvalPoint, np.ndarray]]] = []  # per shard
        self._pending_evals: list[tuple[EvalPoint, float]] = []  # (point, mean train loss)
        self._eval_results: dict[EvalPoint, tuple[float, float]] = {}
        self._snapshot_queues: dict[str, list[list[Snapshot]]] = {}  # label -> per shard
        self._pending_rollback: Decision | None = None
        self._workload_done = False  # some shard has applied the whole workload
        self._last_checkpoint_at = clock()
        self.placement: dict[str, Any] | None = None  # the runtime's word on where actors run

    # -- the run's story, in the order it happens ----------------------------------------------

    def start(self, parameters: int, setup_s: float) -> Step:
        """The actors are up: log the start (or the resume) and start every worker."""
        before = self.phase
        self.setup_s = setup_s
        self._announce(parameters)
        self.phase = RunPhase.TRAINING
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
        decisions += self._end_workload_everywhere(reports)
        self._record(first)
        decisions += self._queue_evaluations(reports)
        decisions += self._react_to_stragglers(first)
        # The guard reads the losses before this drain's snapshots are written: a snapshot
        # taken after the loss went bad must not push the last good checkpoint out of the
        # store (it keeps two) before the rollback can load it.
        verdict = self._watch_divergence(first)
        healthy = (
            None if verdict is None else (verdict.healthy_progress or 0.0) * self.plan.total_samples
        )
        self._take_snapshots(reports, max_samples=healthy)
        if verdict is not None:
            decisions += self._respond_to_divergence(verdict)
        decisions += self._check_quarantine()
        decisions += self._check_hung()
        self._maybe_finishing()
        return Step(before, self.phase, decisions)

    def on_evaluated(self, point: EvalPoint, accuracy: float, loss: float) -> Step:
        """An evaluation is back; metrics are written in training order, whatever the order
        in which evaluations come back."""
        before = self.phase
        self._eval_results[point] = (accuracy, loss)
        while self._pending_evals and self._pending_evals[0][0] in self._eval_results:
            done, train_loss = self._pending_evals.pop(0)
            self._write_metric(done, *self._eval_results.pop(done), train_loss)
        self._maybe_finishing()
        return Step(before, self.phase)

    def on_worker_finished(self, worker: int, stats: WorkerStats) -> Step:
        before = self.phase
        self.workers.running.discard(worker)
        self.workers.finished[worker] = stats
        self._maybe_finishing()
        return Step(before, self.phase)

    def on_worker_died(self, worker: int, cause: str) -> Step:
        """A worker's process is gone: restart it, unless it has failed too often."""
        before, book = self.phase, self.workers
        book.running.discard(worker)
        book.restarts[worker] += 1
        restart = book.restarts[worker]
        reason = (
            "hung: silent longer than worker_timeout_s, killed"
            if worker in book.hung
            else f"died ({cause})"
        )
        limit = self.plan.reliability.max_worker_restarts
        if restart > limit:
            return self._stop(
                f"worker {worker} failed {restart} times (max_worker_restarts = {limit}); "
                f"last: {reason}"
            )
        entry = {
            "kind": "worker",
            "worker": worker,
            "reason": reason,
            "restart": restart,
            "at_fraction": round(self.state.progress, 6),
            "time_s": round(self.state.time_s, 3),
            "recovery": "restarted through the runtime; rejoins at the current version",
        }
        self.record.failures.append(entry)
        self.writer.event("worker_failed", entry)
        book.restarting.add(worker)
        return Step(before, self.phase, [RestartWorker(worker, restart, reason)])

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
            loaded = self.store.load_latest(validate=RunCheckpoint.from_plain)
        except CheckpointError as error:
            return self._stop(f"{reason}, and there is no checkpoint to recover from: {error}")
        if loaded.refused:
            say_refused(loaded, "restoring the parameter servers")
        self.phase = RunPhase.RECOVERING
        # Slices and snapshots that only some shards had sent belong to the lost timeline.
        self._eval_slices.clear()
        self._snapshot_queues.clear()
        entry = {
            "kind": "server",
            "reason": reason,
            "at_fraction": round(self.state.progress, 6),
            "recovery": f"restored from {loaded.info.path.name}",
            "checkpoint_samples": loaded.info.samples,
            "samples_lost": max(self.state.samples - loaded.info.samples, 0),
            "refused_checkpoints": [f"{r.path.name}: {r.reason}" for r in loaded.refused],
        }
        self.record.failures.append(entry)
        self.writer.event("server_failed", entry)
        servers = run_checkpoint(loaded).servers
        restore = RestoreServers(servers, loaded.info.path.name, reason)
        return Step(before, self.phase, [restore])

    def on_servers_restored(self) -> Step:
        """New shards are up: every worker that had not finished trains on against them."""
        before = self.phase
        self.phase = RunPhase.TRAINING
        book = self.workers
        rerun = [
            w
            for w in range(self.plan.workers)
            if w not in book.finished and w not in book.restarting
        ]
        book.running = set(rerun)
        starts = [StartWorker(w, book.restarts[w], "servers restored") for w in rerun]
        return Step(before, self.phase, list(starts))

    def on_rolled_back(self) -> Step:
        """Every shard is back at the checkpoint: log the rollback and watch afresh."""
        before = self.phase
        assert self._pending_rollback is not None
        self.record.rollbacks += 1
        self._log_decision(self._pending_rollback)
        self._pending_rollback = None
        if self.guard is not None:
            self.guard.reset()
        self.phase = RunPhase.TRAINING
        return Step(before, self.phase)

    def on_placed(self, placement: dict[str, Any]) -> Step:
        """Where the actors run now, as the runtime describes it (nodes, hosts, devices):
        kept for the summary, and logged whenever it changes (a restart on another node)."""
        if placement != self.placement:
            self.placement = placement
            self.writer.event("placement", placement)
        return Step(self.phase, self.phase)

    def on_tick(self) -> Step:
        """Time passed: a checkpoint may be due by time."""
        every_s = self.plan.reliability.checkpoint_every_s
        now = self.clock()
        due = every_s and now - self._last_checkpoint_at >= every_s
        if not due or self.phase is not RunPhase.TRAINING:
            return Step(self.phase, self.phase)
        self._last_checkpoint_at = now
        request = RequestSnapshot("timed", f"{every_s:g} s since the last checkpoint")
        return Step(self.phase, self.phase, [request])

    @property
    def evaluations_outstanding(self) -> int:
        return len(self._pending_evals)

    def finish(
        self,
        final_snapshots: list[Snapshot],
        worker_stats: list[WorkerStats],
        final_weights: np.ndarray,
    ) -> dict[str, Any]:
        """The last checkpoint, worker statistics, final weights and summary."""
        assert self.phase is RunPhase.FINISHING and not self._pending_evals, self.phase
        rows = [stats.to_row() for stats in worker_stats]
        self.writer.worker_stats(rows)
        self._checkpoint(final_snapshots)
        summary = self.summary(rows, status="complete")
        self.writer.summary(summary)
        buffer = io.BytesIO()  # written atomically: never through a planted symlink
        torch.save({"flat_weights": torch.tensor(final_weights)}, buffer)
        write_atomic(self.writer.dir / "final_weights.pt", buffer.getvalue())
        self.phase = RunPhase.FINISHED
        return summary

    def fail(self, error: BaseException) -> None:
        """Whatever was produced stays on disk; the summary says how the run ended."""
        self.phase = RunPhase.FAILED
        self.writer.summary(self.summary([], status=f"failed: {error!r}"))

    def summary(self, worker_stats: list[dict], status: str) -> dict[str, Any]:
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
        )

    # -- what a drain tells -----------------------------------------------------------------

    def _record(self, report: ShardReport) -> None:
        outcome = report.outcome
        self.writer.updates(outcome.applied)
        self.writer.drops(outcome.dropped)
        for update in outcome.applied:
            self.record.add_update(update.protocol, update.staleness, update.loss)
        for switch in outcome.switches:
            self.record.switches.append(switch)
            self.writer.event("switch", switch.to_summary())
        for decision in outcome.decisions:  # the shard's own: quarantines
            self._log_decision(decision)

    def _queue_evaluations(self, reports: list[ShardReport]) -> list[RunDecision]:
        """Evaluate a point once every shard has sent its slice of the weights.

        Shards reach the same sample counts but are drained at slightly different moments,
        so one may already hold a point that another has not reached yet.
        """
        while len(self._eval_slices) < len(reports):
            self._eval_slices.append([])
        for queue, report in zip(self._eval_slices, reports, strict=False):
            queue.extend(zip(report.outcome.evaluations, report.eval_weights, strict=True))
        decisions: list[RunDecision] = []
        while all(self._eval_slices):
            slices = [queue.pop(0) for queue in self._eval_slices]
            point = slices[0][0]
            weights = np.concatenate([w for _, w in slices])
            self._pending_evals.append((point, self.record.take_train_loss()))
            decisions.append(Evaluate(point, weights, f"progress reached {point.fraction:g}"))
        return decisions

    def _take_snapshots(self, reports: list[ShardReport], max_samples: float | None) -> None:
        """Shards snapshot at the same points; a checkpoint is written once all have.
        Snapshots past `max_samples` (where the loss was last healthy) are not kept."""
        for index, report in enumerate(reports):
            for snapshot in report.outcome.snapshots:
                if max_samples is not None and snapshot.samples > max_samples:
                    continue
                queues = self._snapshot_queues.setdefault(snapshot.label, [])
                while len(queues) < len(reports):
                    queues.append([])
                queues[index].append(snapshot)
        for queues in self._snapshot_queues.values():
            while queues and all(queues):
                self._checkpoint([queue.pop(0) for queue in queues])

    def _react_to_stragglers(self, first: ShardReport) -> list[RunDecision]:
        """The online policy decides on the steps the first shard saw arrive; every shard
        then carries out the same decisions."""
        if self.monitor is None:
            return []
        view = self.policy_view
        view.follow(first.state)
        decisions: list[RunDecision] = []
        for step in first.observations:
            reaction = self.monitor.observe(step, view, view.assume)
            for event in reaction.straggler_events:
                self.record.straggler_events.append(event)
                self.writer.event(event["event"], {k: v for k, v in event.items() if k != "event"})
            for decision in reaction.decisions:
                self._log_decision(decision)
                decisions.append(ApplyPolicyDecision(decision))
        return decisions

    def _watch_divergence(self, first: ShardReport) -> Divergence | None:
        if self.guard is None or self.phase is not RunPhase.TRAINING:
            return None
        for update in first.outcome.applied:
            verdict = self.guard.observe(
                update.loss, progress=update.progress, time_s=update.time_s
            )
            self.record.guard_initial_level = self.guard.initial_level
            if verdict is not None:
                return verdict
        return None

    def _respond_to_divergence(self, verdict: Divergence) -> list[RunDecision]:
        response = rollback_decision(
            verdict,
            self.state.lr_scale,
            self.state.momentum_policy,
            self.plan.reliability.rollback,
            rollbacks_done=self.record.rollbacks,
        )
        if isinstance(response, GiveUp):
            self._log_decision(response.to_decision())
            self.guard = None  # nothing more to do about it; the summary says so
            return []
        healthy = int((verdict.healthy_progress or 0.0) * self.plan.total_samples)
        try:
            loaded = self.store.load_latest(max_samples=healthy, validate=RunCheckpoint.from_plain)
        except CheckpointError as error:
            reason = f"{verdict.reason}; no checkpoint to roll back to ({error})"
            give_up = replace(response.to_decision(), action=Action.GIVE_UP, reason=reason)
            self._log_decision(give_up)
            self.guard = None
            return []
        decision = response.to_decision()
        self._pending_rollback = replace(
            decision, reason=f"{decision.reason}; restored {loaded.info.path.name}"
        )
        self.phase = RunPhase.ROLLING_BACK
        return [
            RollBack(
                shard_states=run_checkpoint(loaded).servers,
                protocol=response.protocol,
                lr_scale=response.lr_scale,
                momentum=response.momentum,
                label=f"divergence rollback {response.number}",
                reason=self._pending_rollback.reason,
            )
        ]

    def _check_quarantine(self) -> list[RunDecision]:
        """Stop when no worker is left to train: every one is quarantined for bad gradients.

        Otherwise the run would go on forever, each gradient dropped and counted, none
        applied (seen with ASP diverging without the guard: every gradient non-finite).
        """
        quarantined = self.state.quarantined
        if len(quarantined) < self.plan.workers:
            return []
        reasons = [d.reason for d in self.record.decisions if d.action is Action.QUARANTINE]
        example = reasons[0] if reasons else "bad gradients"
        return self._stop(
            f"every worker ({len(quarantined)}) is quarantined for bad gradients (e.g. "
            f"{example}); nothing can be applied, so the run stops at "
            f"{self.state.progress:.1%} of its samples. A diverging run: try the divergence "
            "guard or a lower learning rate",
            stalled=True,
        ).decisions

    def _end_workload_everywhere(self, reports: list[ShardReport]) -> list[RunDecision]:
        """The workload is done once any shard has applied it: workers stop on the first
        shard that says so, and the others must not hold them at a barrier."""
        done = [report.state.done for report in reports]
        if self._workload_done or not any(done):
            return []
        self._workload_done = True
        if all(done):
            return []
        return [FinishShards(f"shard {done.index(True)} has applied the whole workload")]

    def _check_hung(self) -> list[RunDecision]:
        timeout_s = self.plan.reliability.worker_timeout_s
        book, decisions = self.workers, []
        for worker, silent_s in self.state.silent_s.items():
            if silent_s < timeout_s:
                book.hung.discard(worker)
                continue
            if worker in book.hung or worker in book.finished:
                continue
            book.hung.add(worker)
            self.writer.event(
                "worker_hung", {"worker": worker, "silent_s": silent_s, "timeout_s": timeout_s}
            )
            decisions.append(KillWorker(worker, f"silent {silent_s:.1f} s >= {timeout_s:g} s"))
        return decisions

    # -- bookkeeping ----------------------------------------------------------------------------

    def _maybe_finishing(self) -> None:
        book = self.workers
        if (
            self.phase is RunPhase.TRAINING
            and self._workload_done
            and not book.running
            and not book.restarting
            # Every shard's last evaluation slice is in (one ended later than another).
            and not any(self._eval_slices)
        ):
            self.phase = RunPhase.FINISHING

    def _stop(self, reason: str, stalled: bool = False) -> Step:
        before, self.phase = self.phase, RunPhase.FAILED
        return Step(before, self.phase, [Stop(reason, stalled=stalled)])

    def _announce(self, parameters: int) -> None:
        if self.resumed_from is not None:
            info = self.resumed_from.info
            refused = [f"{r.path.name}: {r.reason}" for r in self.resumed_from.refused]
            payload = {"checkpoint": info.to_record(), "refused_checkpoints": refused}
            self.record.failures.append({"kind": "resumed", **payload})
            self.writer.event("run_resumed", payload)
            return
        job, plan = self.plan.job, self.plan
        self.writer.event(
            "run_started",
            {
                "workers": job.workers,
                "servers": job.servers,
                "schedule": job.schedule,
                "total_samples": plan.total_samples,
                "parameters": parameters,
                "runtime": plan.runtime,
                "emulation": plan.timing_label(),
                "online": plan.online.describe() if plan.online else None,
                "faults": plan.faults.describe() or None,
            },
        )

    def _log_decision(self, decision: Decision) -> None:
        self.record.decisions.append(decision)
        self.writer.event("decision", decision.to_record())

    def _write_metric(
        self, point: EvalPoint, accuracy: float, loss: float, train_loss: float
    ) -> None:
        row = {
            "time_s": round(point.time_s, 4),
            "samples": point.samples,
            "fraction": round(point.fraction, 6),
            "version": point.version,
            "protocol": point.protocol,
            "test_accuracy": accuracy,
            "test_loss": loss,
            "train_loss": train_loss,
            "samples_per_s": round(point.samples / point.time_s, 2) if point.time_s else "",
        }
        self.record.metrics.append(row)
        self.writer.metric(row)
        self.writer.summary(self.summary([], status="running"))

    def _checkpoint(self, shard_snapshots: list[Snapshot]) -> None:
        first = shard_snapshots[0]
        record = replace(
            self.record, metrics=[m for m in self.record.metrics if m["samples"] <= first.samples]
        )
        checkpoint = RunCheckpoint(tuple(s.state for s in shard_snapshots), record)
        info = self.store.save(
            checkpoint.to_plain(),
            samples=first.samples,
            label=first.label,
            meta={
                "progress": round(first.progress, 6),
                "version": first.version,
                "time_s": round(first.time_s, 3),
            },
        )
        self.record.checkpoints += 1
        self._last_checkpoint_at = self.clock()
        self.writer.event("checkpoint", info.to_record())


CHECKPOINT_DIR = "checkpoints"


def resume_point(checkpoint: LoadedCheckpoint | None) -> tuple[int, float] | None:
    """(samples, run seconds) a resumed run continues from, or None for a new run."""
    if checkpoint is None:
        return None
    state = run_checkpoint(checkpoint)
    return state.samples, state.time_s


def run_dir_in_use(run_dir: Path) -> list[str]:
    """What of an earlier run a directory holds (a new run must not write into it)."""
    return [n for n in ("config.json", "summary.json", CHECKPOINT_DIR) if (run_dir / n).exists()]
