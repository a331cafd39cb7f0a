"""The straggler monitor's glue (`StragglerResponse`): it decides once, on the step times the
first shard saw arrive, and the same decisions go to every shard."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from syncswitch.control.decisions import ApplyPolicyDecision
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.control.shard import ShardReport, ShardState
from syncswitch.core.stragglers.monitor import StragglerMonitor
from syncswitch.core.sync.protocol import ASP, ProtocolSpec
from syncswitch.core.sync.records import Action, Decision
from syncswitch.rundir import RunWriter, events


@dataclass
class StragglerPolicyView:
    """The run as a straggler policy may read it (core.stragglers.policies.RunView), as last seen
    here."""

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
        if action is Action.EXCLUDE and decision.worker is not None:
            self.excluded |= {decision.worker}
        elif action is Action.READMIT and decision.worker is not None:
            self.excluded -= {decision.worker}
        elif decision.protocol is not None:
            self.spec = decision.protocol


class StragglerResponse:
    def __init__(
        self,
        plan: RunPlan,
        record: RunRecord,
        writer: RunWriter,
        log_decision: Callable[[Decision], None],
    ) -> None:
        self.record = record
        self.writer = writer
        self.log_decision = log_decision
        self.view = StragglerPolicyView()
        self.monitor = (
            StragglerMonitor(
                plan.workers,
                plan.stragglers,
                plan.emulation.stragglers if plan.emulation.enabled else None,
            )
            if plan.stragglers is not None
            else None
        )

    def react(self, first: ShardReport) -> list[ApplyPolicyDecision]:
        """Straggler events and the policy's decisions on the steps the first shard saw."""
        if self.monitor is None:
            return []
        view = self.view
        view.follow(first.state)
        decisions: list[ApplyPolicyDecision] = []
        for step in first.observations:
            reaction = self.monitor.observe(step, view, view.assume)
            for event in reaction.straggler_events:
                self.record.straggler_events.append(event)
                self.writer.event(events.StragglerChanged.from_plain(event.to_plain()))
            for decision in reaction.decisions:
                self.log_decision(decision)
                decisions.append(ApplyPolicyDecision(decision))
        return decisions
