"""Online timing through the run controller (scripted runtime: real shards, no Ray).

A synthetic signal that crosses the threshold gives exactly one switch, at the right point,
on every shard, and the summary says where and why; sharded partials decide as one shard
does; a resumed run continues with its signal history; a rollback's pinned BSP wins.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from syncswitch.control.decisions import ApplyPolicyDecision
from syncswitch.core.timing.gradient_stats import (
    GradientSignals,
    GradientStatsEstimator,
    RoundPartials,
)
from syncswitch.core.timing.rules import TIMING_POLICY, StalenessNoiseRule
from syncswitch.rundir import names, read_summary
from tests.control.scripted import ScriptedRun

DEFAULT_RULE = StalenessNoiseRule()  # what `--schedule online` runs with no --switch-* options
THRESHOLD = DEFAULT_RULE.threshold


class SyntheticSignal:
    """Stands in for the estimator: its staleness ratio falls linearly with progress,
    crossing `threshold` at `crossing` (ratio = (n - 1)^p D b / tr(Sigma) under the default
    exponent p, with n = 4, b = 8, tr(Sigma) = 1: D = ratio / (8 * 3^p))."""

    def __init__(self, run: ScriptedRun, threshold: float, crossing: float) -> None:
        self.run, self.threshold, self.crossing = run, threshold, crossing
        self.rounds = 0

    def add(self, partials: RoundPartials) -> None:
        self.rounds += 1

    @property
    def signals(self) -> GradientSignals | None:
        if not self.rounds:
            return None
        ratio = 2 * self.threshold * (1 - self.run.progress / (2 * self.crossing))
        return GradientSignals(
            version=self.rounds,
            rounds=self.rounds,
            workers=4,
            samples=32,
            noise_trace=1.0,
            grad_sq=0.01,
            drift_sq=ratio / (8 * 3**DEFAULT_RULE.staleness_exponent),
            drift_stderr=0.0,  # a sure estimate: the rule's confidence is tested in core
            drift_rounds=self.rounds,
        )

    def to_plain(self) -> dict:
        return GradientStatsEstimator(1.0).to_plain()  # a checkpoint holds a real one


def timing_switches(run: ScriptedRun) -> list:
    return [
        d.decision
        for step in run.steps
        for d in step.decisions
        if isinstance(d, ApplyPolicyDecision) and d.decision.policy == TIMING_POLICY
    ]


def test_a_synthetic_signal_crossing_the_threshold_switches_once_at_the_crossing(tmp_path):
    run = ScriptedRun(tmp_path, schedule="online", epochs=20.0, servers=2)
    timing = run.controller.timing
    assert timing is not None
    timing.history.estimator = SyntheticSignal(run, threshold=THRESHOLD, crossing=0.4)
    run.run()
    [decision] = timing_switches(run)
    # Below the threshold from 0.4 on; the rule waits for 3 checks (0.005 apart; a round is
    # 0.005 of training here) and the shards act at the next version boundary.
    assert 0.4 < decision.progress <= 0.4 + 5 * 0.005
    summary = read_summary(tmp_path)
    timing_summary = summary.online_timing
    assert timing_summary is not None and timing_summary.switched
    assert timing_summary.reason == "signal" and timing_summary.rule == "staleness"
    assert timing_summary.values["staleness_ratio"] < THRESHOLD
    assert timing_summary.at_fraction == pytest.approx(decision.progress, abs=0.006)
    # One switch, on every shard, to ASP; nothing else switched.
    assert [(s.from_protocol, s.to_protocol) for s in summary.switches] == [("bsp", "asp")]
    assert summary.switches[0].reason.startswith(TIMING_POLICY)
    assert all(s.sync.live.spec.name == "asp" for s in run.shards)
    assert {s.sync.live.phase_index for s in run.shards} == {1}
    # The events and the signal file say it too.
    lines = (tmp_path / names.EVENTS).read_text().splitlines()
    [event] = [e for e in map(json.loads, lines) if e["event"] == "online_timing"]
    assert event["reason"] == "signal" and event["to"] == "asp"
    rows = (tmp_path / names.TIMING_SIGNALS).read_text().splitlines()
    assert rows[0].split(",")[: len(names.TIMING_SIGNAL_COLUMNS)] == list(
        names.TIMING_SIGNAL_COLUMNS
    )
    assert rows[-1].split(",")[names.TIMING_SIGNAL_COLUMNS.index("decision")] == "signal"


def test_without_a_crossing_the_shards_end_the_phase_at_the_ceiling(tmp_path):
    run = ScriptedRun(tmp_path, schedule="online", epochs=20.0, switch_ceiling=0.5)
    timing = run.controller.timing
    assert timing is not None
    timing.history.estimator = SyntheticSignal(run, threshold=THRESHOLD, crossing=2.0)  # never
    run.run()
    summary = read_summary(tmp_path)
    assert [s.to_protocol for s in summary.switches] == ["asp"]
    assert summary.switches[0].at_fraction == pytest.approx(0.5, abs=0.006)
    assert summary.online_timing is not None and summary.online_timing.reason == "ceiling"


def test_two_shards_decide_as_one(tmp_path):
    runs = [
        ScriptedRun(tmp_path / f"s{servers}", schedule="online", epochs=20.0, servers=servers)
        for servers in (1, 2)
    ]
    for run in runs:
        run.run()
    one, two = (run.controller.record.timing for run in runs)
    assert len(one.points) == len(two.points) > 10
    for a, b in zip(one.points, two.points, strict=True):
        assert a.progress == b.progress
        assert a.noise_trace == pytest.approx(b.noise_trace, rel=1e-4)
        assert a.grad_sq == pytest.approx(b.grad_sq, rel=1e-4, abs=1e-9)
    assert one.decision is not None and two.decision is not None
    assert (one.decision.progress, one.decision.reason) == (
        two.decision.progress,
        two.decision.reason,
    )


def test_a_resumed_run_continues_with_its_signal_history(tmp_path):
    first = ScriptedRun(tmp_path, schedule="online", epochs=20.0, switch_ceiling=0.8)
    first.run(stop_at=0.3)
    checkpointed = first.controller.record.timing
    assert checkpointed.points and checkpointed.decision is None
    resumed = ScriptedRun(tmp_path, schedule="online", epochs=20.0, switch_ceiling=0.8, resume=True)
    history = resumed.controller.record.timing
    # The checkpoint (every 0.1) holds the history up to it, estimator included.
    assert 0 < len(history.points) <= len(checkpointed.points)
    assert history.estimator is not None and history.estimator.signals is not None
    kept = list(history.points)
    resumed.run()
    assert history.points[: len(kept)] == kept  # continued, not restarted
    assert resumed.summary is not None and resumed.summary.online_timing is not None
    assert resumed.summary.online_timing.switched


def test_a_rollback_pins_bsp_and_online_timing_does_not_leave_it(tmp_path):
    def blow_up(run: ScriptedRun) -> None:
        run.loss_offset = 50.0

    run = ScriptedRun(
        tmp_path, schedule="online", epochs=20.0, switch_ceiling=0.8, script={0.2: blow_up}
    )
    timing = run.controller.timing
    assert timing is not None
    timing.history.estimator = SyntheticSignal(run, threshold=THRESHOLD, crossing=0.5)
    run.run()
    summary = read_summary(tmp_path)
    assert summary.reliability is not None and summary.reliability.pinned_protocol == "bsp"
    assert all(s.sync.live.spec.name == "bsp" for s in run.shards)
    assert all(s.to_protocol == "bsp" for s in summary.switches)
    assert summary.online_timing is not None and not summary.online_timing.switched


def test_elastic_and_online_timing_compose(tmp_path):
    def slow(run: ScriptedRun) -> None:
        run.slow[3] = 5.0

    run = ScriptedRun(
        tmp_path,
        schedule="online",
        epochs=20.0,
        servers=2,
        online_policy="elastic",
        script={0.1: slow},
    )
    timing = run.controller.timing
    assert timing is not None
    timing.history.estimator = SyntheticSignal(run, threshold=THRESHOLD, crossing=0.4)
    run.run()
    summary = read_summary(tmp_path)
    assert summary.online is not None
    assert ("exclude", 3) in [(d["action"], d["worker"]) for d in summary.online["decisions"]]
    assert summary.online_timing is not None and summary.online_timing.reason == "signal"
    assert [s.to_protocol for s in summary.switches] == ["asp"]
    # The staleness factor is the run's 4 workers, not the 3 an elastic round waits for.
    assert all(p.workers == 4 for p in timing.history.points)
    assert math.isclose(summary.online_timing.threshold, THRESHOLD)


def test_an_old_summary_without_online_timing_still_reads(tmp_path: Path):
    run = ScriptedRun(tmp_path, schedule="bsp:0.5,asp").run()
    data = json.loads((tmp_path / names.SUMMARY).read_text())
    data.pop("online_timing")
    (tmp_path / names.SUMMARY).write_text(json.dumps(data))
    assert read_summary(tmp_path).online_timing is None
    assert run.controller.timing is None


def test_greedy_and_online_timing_compose(tmp_path):
    def slow(run: ScriptedRun) -> None:
        run.slow[1] = 5.0

    run = ScriptedRun(
        tmp_path,
        schedule="online",
        epochs=20.0,
        servers=2,
        online_policy="greedy",
        switch_ceiling=0.6,
        script={0.1: slow},
    ).run()
    summary = read_summary(tmp_path)
    # Greedy left BSP first; the online phase then ended at its ceiling without a switch.
    assert [s.reason.split(":")[0] for s in summary.switches] == ["greedy switch"]
    assert all(s.sync.live.spec.name == "asp" and s.sync.live.phase_index == 1 for s in run.shards)
    assert summary.online_timing is not None and not summary.online_timing.switched
    assert summary.gradients.unaccounted == 0


def test_shards_measure_one_round_in_every_as_cost_and_noise_allow():
    from syncswitch.control.plan import MEASURED_PER_HALF_LIFE, STATS_ROUND_WORKERS, stats_every

    # The scale study's job: 25,000 / n BSP rounds, a half-life of 2% of them.
    assert [stats_every(n, 0.02 * 25_000 / n) for n in (8, 16, 32, 64)] == [4, 2, 1, 1]
    # every * n about STATS_ROUND_WORKERS, however many rounds the run has ...
    assert stats_every(2, 10_000.0) == STATS_ROUND_WORKERS // 2
    # ... but never fewer than MEASURED_PER_HALF_LIFE measured rounds per half-life.
    assert stats_every(8, 2 * MEASURED_PER_HALF_LIFE) == 2
    assert stats_every(8, 5.0) == 1


def test_sparse_measuring_shards_decide_as_one(tmp_path, monkeypatch):
    # With one round in 4 measured (in pairs) and 2 of 4 workers squared, two shards'
    # partials add to what one shard measures: the same points and the same decision.
    monkeypatch.setattr("syncswitch.control.plan.STATS_ROUND_WORKERS", 16)
    monkeypatch.setattr("syncswitch.control.plan.MEASURED_PER_HALF_LIFE", 1)
    monkeypatch.setattr("syncswitch.control.plan.STATS_WORKERS", 2)
    runs = [
        ScriptedRun(tmp_path / f"s{servers}", schedule="online", epochs=20.0, servers=servers)
        for servers in (1, 2)
    ]
    for run in runs:
        assert run.plan.timing is not None and run.plan.timing.stats_every == 4
        assert run.plan.sync.stats_workers == 2
        run.run()
    one, two = (run.controller.record.timing for run in runs)
    assert len(one.points) == len(two.points) > 10
    assert one.estimator is not None and one.estimator.signals is not None
    for a, b in zip(one.points, two.points, strict=True):
        assert a.noise_trace == pytest.approx(b.noise_trace, rel=1e-4)
        assert a.drift_sq == pytest.approx(b.drift_sq, rel=1e-3, abs=1e-9)
    assert one.decision is not None and two.decision is not None
    assert one.decision.progress == two.decision.progress
