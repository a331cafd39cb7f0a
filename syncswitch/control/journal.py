"""The run controller's journal: what the first shard reports, and every decision, written to
the run record and the run directory."""

from __future__ import annotations

from collections.abc import Callable

from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.control.shard import ShardReport
from syncswitch.core.reliability.checkpoints import LoadedCheckpoint
from syncswitch.core.sync.records import Decision
from syncswitch.records import Switch
from syncswitch.records.failures import Resumption
from syncswitch.rundir import RunWriter, events


class RunJournal:
    def __init__(
        self,
        record: RunRecord,
        writer: RunWriter,
        on_switch: Callable[[Switch], None] | None = None,
    ) -> None:
        """`on_switch` is told of each switch once it is recorded (the callbacks' hook)."""
        self.record = record
        self.writer = writer
        self.on_switch = on_switch

    def shard_outcome(self, report: ShardReport) -> None:
        """Write what the first shard applied, dropped, switched and quarantined."""
        outcome = report.outcome
        self.writer.updates(outcome.applied)
        self.writer.drops(outcome.dropped)
        for update in outcome.applied:
            self.record.add_update(update.protocol, update.staleness, update.loss)
        for switch in outcome.switches:
            self.record.switches.append(switch)
            self.writer.event(events.ProtocolSwitched(switch))
            if self.on_switch is not None:
                self.on_switch(switch)
        for decision in outcome.decisions:  # the shard's own: quarantines
            self.log_decision(decision)

    def log_decision(self, decision: Decision) -> None:
        self.record.decisions.append(decision)
        self.writer.event(events.DecisionMade.from_plain(decision.to_plain()))


def announce(
    writer: RunWriter,
    plan: RunPlan,
    record: RunRecord,
    resumed_from: LoadedCheckpoint | None,
    parameters: int,
) -> None:
    """Log the run's start, or its resume from a checkpoint."""
    if resumed_from is not None:
        info = resumed_from.info
        refused = tuple(f"{r.path.name}: {r.reason}" for r in resumed_from.refused)
        resumed = Resumption(checkpoint=info.to_plain(), refused_checkpoints=refused)
        record.failures.append(resumed)
        writer.event(events.RunResumed(resumed))
        return
    job = plan.job
    writer.event(
        events.RunStarted(
            workers=job.workers,
            servers=job.servers,
            schedule=job.schedule,
            total_samples=plan.total_samples,
            parameters=parameters,
            runtime=plan.runtime,
            emulation=plan.timing_label(),
            online=plan.stragglers.describe() if plan.stragglers else None,
            faults=plan.faults.describe() or None,
        )
    )
