"""The run controller's journal: what the first shard reports, and every decision, written to
the run record and the run directory."""

from __future__ import annotations

from syncswitch.control.record import RunRecord
from syncswitch.control.shard import ShardReport
from syncswitch.core.sync.records import Decision
from syncswitch.rundir import RunWriter, events


class RunJournal:
    def __init__(self, record: RunRecord, writer: RunWriter) -> None:
        self.record = record
        self.writer = writer

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
        for decision in outcome.decisions:  # the shard's own: quarantines
            self.log_decision(decision)

    def log_decision(self, decision: Decision) -> None:
        self.record.decisions.append(decision)
        self.writer.event(events.DecisionMade.from_plain(decision.to_plain()))
