"""Health checks: where each worker's loop stands, and what the controller must do about a
worker that died, went silent, or a run where nothing can be applied any more."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from syncswitch.control.decisions import KillWorker, RestartWorker, Stop
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.control.shard import ShardState
from syncswitch.core.sync.records import Action, WorkerStats
from syncswitch.records.failures import WorkerFailure
from syncswitch.rundir import RunWriter, events


@dataclass
class WorkerBook:
    """Where each worker's training loop stands."""

    running: set[int] = field(default_factory=set)
    restarting: set[int] = field(default_factory=set)  # dead, until the runtime has it up again
    finished: dict[int, WorkerStats] = field(default_factory=dict)
    restarts: Counter[int] = field(default_factory=Counter)
    hung: set[int] = field(default_factory=set)  # killed as hung, until heard from again

    def unfinished(self, workers: int) -> list[int]:
        """Workers whose loop should run again against new servers (not restarting: those
        start once they are up)."""
        return [w for w in range(workers) if w not in self.finished and w not in self.restarting]


class HealthChecks:
    def __init__(self, plan: RunPlan, writer: RunWriter, record: RunRecord) -> None:
        self.plan = plan
        self.writer = writer
        self.record = record
        self.workers = WorkerBook()

    def worker_died(self, worker: int, cause: str, state: ShardState) -> RestartWorker | Stop:
        """Restart a dead worker, unless it has failed too often."""
        book = self.workers
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
            return Stop(
                f"worker {worker} failed {restart} times (max_worker_restarts = {limit}); "
                f"last: {reason}"
            )
        failure = WorkerFailure(
            worker=worker,
            reason=reason,
            restart=restart,
            at_fraction=round(state.progress, 6),
            time_s=round(state.time_s, 3),
            recovery="restarted through the runtime; rejoins at the current version",
        )
        self.record.failures.append(failure)
        self.writer.event(events.WorkerFailed(failure))
        book.restarting.add(worker)
        return RestartWorker(worker, restart, reason)

    def stalled(self, state: ShardState) -> Stop | None:
        """Stop when no worker is left to train: every one is quarantined for bad gradients.

        Otherwise the run would go on forever, each gradient dropped and counted, none
        applied (seen with ASP diverging without the guard: every gradient non-finite).
        """
        quarantined = state.quarantined
        if len(quarantined) < self.plan.workers:
            return None
        reasons = [d.reason for d in self.record.decisions if d.action is Action.QUARANTINE]
        example = reasons[0] if reasons else "bad gradients"
        return Stop(
            f"every worker ({len(quarantined)}) is quarantined for bad gradients (e.g. "
            f"{example}); nothing can be applied, so the run stops at "
            f"{state.progress:.1%} of its samples. A diverging run: try the divergence "
            "guard or a lower learning rate",
            stalled=True,
        )

    def hung(self, state: ShardState) -> list[KillWorker]:
        """Kill each worker silent for worker_timeout_s or more, once (a restart follows)."""
        timeout_s = self.plan.reliability.worker_timeout_s
        book, decisions = self.workers, []
        for worker, silent_s in state.silent_s.items():
            if silent_s < timeout_s:
                book.hung.discard(worker)
                continue
            if worker in book.hung or worker in book.finished:
                continue
            book.hung.add(worker)
            self.writer.event(events.WorkerHung(worker, silent_s, timeout_s))
            decisions.append(KillWorker(worker, f"silent {silent_s:.1f} s >= {timeout_s:g} s"))
        return decisions
