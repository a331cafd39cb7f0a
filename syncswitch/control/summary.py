"""The run's Summary (summary.json), built from what the controller has recorded."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from syncswitch.control.best_weights import TEST_WEIGHTS
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.control.shard import ShardState
from syncswitch.core.stragglers.detector import EventKind
from syncswitch.core.sync.records import WorkerStats
from syncswitch.core.timing.rules import TIMING_POLICY
from syncswitch.records import Accounting
from syncswitch.records.metric import TEST, VALIDATION
from syncswitch.rundir import OnlineTimingSummary, Reliability, Summary


def build_summary(
    plan: RunPlan,
    record: RunRecord,
    state: ShardState,
    *,
    schedule_source: dict[str, Any],
    run_dir: Path,
    setup_s: float,
    host_s: float,
    worker_stats: list[WorkerStats],
    status: str,
    placement: dict[str, Any] | None = None,
    traffic: dict[str, Any] | None = None,
    staleness_rules: dict[str, Any] | None = None,
    memory: dict[str, Any] | None = None,
) -> Summary:
    """What the run did so far (`status` says whether it is over); `state` is the first
    shard's latest."""
    metric = plan.metric
    final = record.final_metric()
    measured = {metric.split: dict(final.values) if final else None}
    if record.test is not None:
        measured[TEST] = record.test
    wall_s = final.time_s if final else state.time_s
    samples = state.samples
    policy = plan.straggler_policy_name
    return Summary(
        status=status,
        metric=metric,
        final_value=final.value if final else None,
        best_value=metric.best(m.value for m in record.metrics),
        validation=measured.get(VALIDATION),
        test=measured.get(TEST),
        best=record.bests[-1].describe() if record.bests else None,
        test_weights=TEST_WEIGHTS if record.test is not None else None,
        stopped_early=record.stopped_early,
        runtime=plan.runtime,
        wall_time_s=wall_s,
        host_time_s=round(host_s, 3),
        setup_time_s=round(setup_s, 3),
        samples=samples,
        samples_per_s=samples / wall_s if wall_s else None,
        tokens_per_sample=plan.tokens_per_sample,
        tokens_per_s=(
            samples * plan.tokens_per_sample / wall_s if wall_s and plan.tokens_per_sample else None
        ),
        updates=state.version,
        updates_per_s=state.version / wall_s if wall_s else None,
        schedule=plan.job.schedule,
        schedule_source=schedule_source,
        time_by_protocol=state.time_by_protocol,
        samples_by_protocol=state.samples_by_protocol,
        switches=tuple(s.rounded() for s in record.switches),  # as events.jsonl has them
        staleness=record.staleness_summary(),
        staleness_rules=staleness_rules,
        memory=memory,
        # No drain yet (a run that failed while starting): no gradient was sent.
        gradients=state.accounting or Accounting(),
        workers=plan.workers,
        worker_step_time_mean_s=(
            float(np.mean([w.step_time_mean_s for w in worker_stats])) if worker_stats else None
        ),
        precision=plan.job.precision,
        emulation=plan.timing_label(),
        cluster=plan.cluster.describe() if plan.cluster is not None else None,
        online=_stragglers_summary(plan, record, state),
        online_timing=_timing_summary(plan, record),
        reliability=Reliability(
            checkpoints=record.checkpoints,
            failures=[failure.to_plain() for failure in record.failures],
            rollbacks=record.rollbacks,
            pinned_protocol=state.pinned.name if state.pinned else None,
            lr_scale=state.lr_scale,
            guard_initial_loss=record.guard_initial_level,
            # Quarantines, rollbacks: every decision but the straggler policy's.
            decisions=[
                d.to_plain() for d in record.decisions if d.policy not in (policy, TIMING_POLICY)
            ],
            faults_injected=plan.faults.describe(),
        ),
        placement=placement,  # where the actors ran (nodes, hosts, devices), as reported
        traffic=traffic,
        run_dir=str(run_dir),
    )


def traffic_of(states: list[ShardState]) -> dict[str, Any]:
    """What the servers received, summed over the shards (a worker's step is one message to
    each): messages and bytes of gradient and delta values by protocol, measured as they
    arrived; and samples of local steps lost unsent, by reason (every shard counts the same
    samples: the most any one counted)."""

    def total(name: str, combine: Callable[[int, int], int] = operator.add) -> dict[str, int]:
        summed: dict[str, int] = {}
        for state in states:
            for key, value in getattr(state, name).items():
                summed[key] = combine(summed[key], value) if key in summed else value
        return dict(sorted(summed.items()))

    bytes_by_protocol = total("bytes_by_protocol")
    traffic = {
        "messages_by_protocol": total("messages_by_protocol"),
        "bytes_by_protocol": bytes_by_protocol,
        "bytes_sent": sum(bytes_by_protocol.values()),
        "unsent_local_samples": total("unsent_samples", max),
    }
    incomplete = max((state.norm_incomplete for state in states), default=0)
    if incomplete:  # clipped rounds a shard applied without every shard's norm (rare)
        traffic["norm_exchange_incomplete_rounds"] = incomplete
    return traffic


def staleness_rules_of(plan: RunPlan, states: list[ShardState]) -> dict[str, Any] | None:
    """The staleness rules in force (core/sync/staleness.py), with delay compensation's
    memory summed over the shards: the most held at once and the worst case (workers x
    parameters x 4 bytes); None when none is."""
    rules = plan.sync.staleness
    if not rules.enabled:
        return None
    block: dict[str, Any] = {
        "describe": rules.describe(),
        "lr": rules.lr_rule.value,
        "lr_floor": rules.lr_floor,
        "delay_compensation": rules.delay_compensation,
    }
    if rules.delay_compensation > 0:
        block["handed_out_peak_bytes"] = sum(s.handed_out_peak_bytes for s in states)
        block["handed_out_worst_case_bytes"] = sum(s.handed_out_worst_case_bytes for s in states)
        block["uncompensated"] = max((s.uncompensated for s in states), default=0)
    return block


def _timing_summary(plan: RunPlan, record: RunRecord) -> OnlineTimingSummary | None:
    timing = plan.timing
    if timing is None:
        return None
    described = timing.describe()
    history = record.timing
    decision = history.decision
    index = plan.schedule.online_index
    assert index is not None
    # The switch that ended the online phase (by the decision, or at the ceiling on its own).
    switch = next(
        (s.rounded() for s in record.switches if s.reason.startswith(TIMING_POLICY)), None
    )
    return OnlineTimingSummary(
        rule=described["rule"],
        threshold=described["threshold"],
        floor=timing.bounds.floor,
        ceiling=timing.bounds.ceiling,
        switched=switch is not None,
        at_fraction=switch.at_fraction if switch else None,
        decided_at=round(decision.progress, 6) if decision else None,
        at_samples=switch.at_samples if switch else None,
        time_s=switch.time_s if switch else None,
        to_protocol=switch.to_protocol if switch else None,
        reason=decision.reason.value if decision else None,
        describe=decision.describe() if decision else "",
        values=(
            {k: (v if math.isfinite(v) else None) for k, v in decision.values.items()}
            if decision
            else {}
        ),
        checks=history.checks,
        follower=history.follower.to_plain() if history.follower is not None else None,
    )


def _stragglers_summary(
    plan: RunPlan, record: RunRecord, state: ShardState
) -> dict[str, Any] | None:
    if plan.stragglers is None:
        return None
    events = record.straggler_events
    detected = [e for e in events if e.kind is EventKind.DETECTED]
    delays = [e.delay_s for e in detected if e.delay_s is not None]
    return {
        **plan.stragglers.describe(),
        "planned_bsp_samples": round(plan.planned_bsp_fraction * plan.total_samples),
        "bsp_samples": state.samples_by_protocol.get("bsp", 0),
        "detections": len(detected),
        # Scored only against emulated stragglers (ground truth); unknown on real hardware.
        "false_detections": (
            sum(1 for e in detected if e.false_detection) if plan.emulation.enabled else None
        ),
        "detection_delay_s_median": float(np.median(delays)) if delays else None,
        "excluded_at_end": list(state.excluded),
        "decisions": [
            d.to_plain() for d in record.decisions if d.policy == plan.straggler_policy_name
        ],
        "straggler_events": [e.to_plain() for e in events],
    }
