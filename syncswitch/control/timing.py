"""Online timing's glue: when the schedule's online phase ends, decided from measured signals.

Every shard measures its slice's gradient statistics in each BSP round of the online phase
(core/timing/gradient_stats.py) and sends the partial sums in its report. Here the partials of one
round are added over the shards (so `--servers N` sees the whole gradient), fed to one
estimator, and every `check_every` of progress the rule (core/timing/rules.py) is asked
whether to leave BSP, within the share's floor and ceiling. A pure loss-plateau rule reads the
evaluator's validation losses instead. A switch goes to every shard as a typed decision with its
reason (an `EndOnlinePhase`, which the shards tell from a straggler policy's switch by its
type); shards end the phase in place at a version boundary (a protocol a divergence rollback
pinned stays in force). Shards end the phase at its ceiling on their own too, so the ceiling
holds even between two checks.

What it has learnt (`TimingHistory`: the estimator's state, the points, the decision) is kept
in the run record and checkpointed with it, so a resumed run continues with its history.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from syncswitch.control.decisions import ApplyPolicyDecision
from syncswitch.control.plan import TimingPlan
from syncswitch.control.shard import ShardReport, ShardState
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Decision, EndOnlinePhase
from syncswitch.core.timing.follower import FollowerChoice, MessageCostMeter, choose_follower
from syncswitch.core.timing.gradient_stats import (
    GradientStatsEstimator,
    RoundPartials,
    add_partials,
)
from syncswitch.core.timing.rules import (
    SIGNAL_KEYS,
    GradientPoint,
    LossPoint,
    OnlineSwitchDecision,
    TimingReason,
    decide,
    rule_threshold,
    uses_losses,
)
from syncswitch.rundir import RunWriter, events


@dataclass
class TimingHistory:
    """What online timing has learnt so far: checkpointed with the run record."""

    estimator: GradientStatsEstimator | None = None
    points: list[GradientPoint] = field(default_factory=list)
    losses: list[LossPoint] = field(default_factory=list)
    next_check: float = 0.0  # progress of the next check
    decision: OnlineSwitchDecision | None = None  # the switch, once decided
    at: dict[str, Any] = field(default_factory=dict)  # samples, time_s of the decision
    checks: int = 0  # times the rule was asked
    # `--schedule online` alone: what the BSP rounds cost, and the phase chosen to follow.
    meter: MessageCostMeter = field(default_factory=MessageCostMeter)
    follower: FollowerChoice | None = None

    def to_plain(self) -> dict[str, Any]:
        return {
            "meter": self.meter.to_plain(),
            "follower": self.follower.to_plain() if self.follower is not None else None,
            "estimator": self.estimator.to_plain() if self.estimator is not None else None,
            "points": [asdict(p) for p in self.points],
            "losses": [asdict(p) for p in self.losses],
            "next_check": self.next_check,
            "decision": self.decision.to_plain() if self.decision is not None else None,
            "at": self.at,
            "checks": self.checks,
        }

    @classmethod
    def from_plain(cls, state: dict[str, Any]) -> TimingHistory:
        estimator, decision = state["estimator"], state["decision"]
        follower = state.get("follower")  # absent in checkpoints of runs before the choice
        return cls(
            meter=(
                MessageCostMeter.from_plain(state["meter"])
                if "meter" in state
                else MessageCostMeter()
            ),
            follower=None if follower is None else FollowerChoice.from_plain(follower),
            estimator=None if estimator is None else GradientStatsEstimator.from_plain(estimator),
            points=[GradientPoint(**p) for p in state["points"]],
            losses=[LossPoint(**p) for p in state["losses"]],
            next_check=float(state["next_check"]),
            decision=None if decision is None else OnlineSwitchDecision.from_plain(decision),
            at=dict(state["at"]),
            checks=int(state.get("checks", 0)),
        )


class OnlineTiming:
    def __init__(
        self,
        plan: TimingPlan,
        history: TimingHistory,
        writer: RunWriter,
        next_protocol: ProtocolSpec,
        log_decision: Callable[[Decision], None],
    ) -> None:
        """`next_protocol`: the protocol of the phase after the online one, unless the plan
        has the run choose it (`plan.chooses_follower`: core/timing/follower.py)."""
        self.plan = plan
        self.history = history
        self.writer = writer
        self.next_protocol = next_protocol
        self.log_decision = log_decision
        if history.estimator is None and not uses_losses(plan.rule):
            history.estimator = GradientStatsEstimator(plan.half_life_rounds)
        # Partials by version, by shard, until every shard has sent its part of the round.
        self._pending: dict[int, dict[int, RoundPartials]] = {}

    @property
    def decided(self) -> bool:
        return self.history.decision is not None

    def add_loss(self, fraction: float, loss: float) -> None:
        """An evaluation's loss on the split decisions read, validation (the loss-plateau
        rule reads these; the test split never reaches a decision)."""
        if math.isfinite(loss) and not self.decided:
            self.history.losses.append(LossPoint(fraction, loss))

    def react(self, reports: list[ShardReport], state: ShardState) -> list[ApplyPolicyDecision]:
        """Take in the shards' partials; at a check, ask the rule; a switch for every shard."""
        if self.decided:
            return []
        self._take_partials(reports)
        history, every = self.history, self.plan.check_every
        if self.plan.chooses_follower and reports:
            history.meter.add(reports[0].outcome.applied)
        if state.progress < history.next_check or state.pinned is not None:
            # Between checks; or a divergence rollback pinned the protocol (it wins: the
            # phase ends at its ceiling, in the pinned protocol).
            return []
        history.next_check = (math.floor(state.progress / every + 1e-9) + 1) * every
        signals = history.estimator.signals if history.estimator is not None else None
        if signals is not None:
            history.points.append(
                GradientPoint(
                    progress=state.progress,
                    workers=self.plan.workers,  # ASP's staleness: the run's workers
                    worker_batch=signals.samples / signals.workers,  # the round's own batch
                    noise_trace=signals.noise_trace,
                    grad_sq=signals.grad_sq,
                    drift_sq=signals.drift_sq,
                    drift_stderr=signals.drift_stderr,
                    drift_rounds=signals.drift_rounds,
                )
            )
        observed = history.losses if uses_losses(self.plan.rule) else history.points
        decision = decide(self.plan.rule, observed, state.progress, self.plan.bounds)
        plan = self.plan
        follower = (
            choose_follower(history.meter, plan.one_machine) if plan.chooses_follower else None
        )
        local = follower is not None and follower.is_local
        if local and not decision.switch and state.progress >= self.plan.bounds.floor:
            # Every BSP round costs several steps' time here: a local phase now.
            assert follower is not None
            decision = OnlineSwitchDecision(
                True,
                TimingReason.MESSAGE_COST,
                self.plan.rule.name,
                state.progress,
                {"message_ratio": follower.ratio or math.nan},
            )
        history.checks += 1
        self.writer.timing_signal(self._row(state, decision))
        if not decision.switch:
            return []
        return [self._switch(decision, state, follower)]

    def _switch(
        self, decision: OnlineSwitchDecision, state: ShardState, follower: FollowerChoice | None
    ) -> ApplyPolicyDecision:
        self.history.decision = decision
        self.history.follower = follower
        self.history.at = {"samples": state.samples, "time_s": state.time_s}
        protocol = (
            ProtocolSpec.parse(follower.protocol) if follower is not None else self.next_protocol
        )
        describe = decision.describe()
        if follower is not None:
            describe += f"; {follower.describe()}"
        self.writer.event(
            events.OnlineTimingDecided(
                **decision.to_plain(),
                samples=state.samples,
                time_s=state.time_s,
                to=protocol.name,
                describe=describe,
                follower=follower.to_plain() if follower is not None else None,
            )
        )
        switch = EndOnlinePhase.at(
            reason=describe,
            time_s=state.time_s,
            progress=state.progress,
            protocol=protocol,
        )
        self.log_decision(switch)
        return ApplyPolicyDecision(switch)

    def _take_partials(self, reports: list[ShardReport]) -> None:
        estimator = self.history.estimator
        if estimator is None:
            return
        pending, shards = self._pending, len(reports)
        for index, report in enumerate(reports):
            for part in report.outcome.partials:
                pending.setdefault(part.version, {})[index] = part
        complete = sorted(v for v, parts in pending.items() if len(parts) == shards)
        for version in complete:
            parts = pending.pop(version)
            try:
                total = add_partials([parts[i] for i in range(shards)])
            except ValueError:
                continue  # shards saw the round differently (a drop on one): not measured
            estimator.add(total)
        if complete:
            # A round some shard never sent (a restored server) is never completed.
            for version in [v for v in pending if v < complete[-1]]:
                del pending[version]

    def _row(self, state: ShardState, decision: OnlineSwitchDecision) -> dict[str, Any]:
        values = decision.values
        point = self.history.points[-1] if self.history.points else None
        signal_key = SIGNAL_KEYS.get(self.plan.rule.name, "")
        return {
            "samples": state.samples,
            "fraction": state.progress,
            "rule": self.plan.rule.name,
            "noise_trace": point.noise_trace if point else None,
            "grad_sq": point.grad_sq if point else None,
            "drift_sq": point.drift_sq if point else None,
            "drift_stderr": point.drift_stderr if point else None,
            "drift_rounds": point.drift_rounds if point else None,
            "noise_scale": values.get("noise_scale"),
            "loss": values.get("loss"),
            "signal": values.get(signal_key),
            "threshold": rule_threshold(self.plan.rule),
            "decision": decision.reason.value,
        }
