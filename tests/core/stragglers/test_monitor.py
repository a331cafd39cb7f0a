"""Online straggler policies driven through the real synchronizer on a virtual clock.

A few lines of discrete-event simulation stand in for the runtime: each worker computes for
its step time and submits; a released worker starts its next step at once. The detector,
policy and synchronizer are the production ones; only time is virtual.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import pytest
import torch

from syncswitch.core.stragglers.detector import EventKind, StragglerRecord
from syncswitch.core.stragglers.monitor import StragglerMonitor, StragglerMonitorConfig
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.core.stragglers.scenarios import StragglerEpisode, StragglerScenario
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import ASP, BSP, Schedule
from syncswitch.core.sync.records import Gradient, Outcome
from syncswitch.core.sync.synchronizer import Synchronizer

BATCH = 4
STEP_S = 0.02


class VirtualRun:
    def __init__(
        self,
        schedule: str,
        policy: StragglerPolicyKind,
        step_s: Callable[[int, float, float], float],
        *,
        workers: int = 8,
        total: int = 8 * BATCH * 400,
        greedy_return: bool = False,
        scenario: StragglerScenario | None = None,
    ) -> None:
        self.now = 0.0
        config = SyncConfig(
            workers=workers,
            total_samples=total,
            schedule=Schedule.parse(schedule),
            lr=0.1,
            count_bsp_by_work=greedy_return,
        )
        self.sync = Synchronizer(config, FlatSGD(torch.zeros(3)), clock=lambda: self.now)
        self.monitor = StragglerMonitor(
            workers, StragglerMonitorConfig(policy, greedy_return), scenario
        )
        self.step_s = step_s
        self.outcome = Outcome()
        self.straggler_events: list[StragglerRecord] = []
        self.policy_decisions: list = []
        self.steps = [0] * workers
        self._queue: list[tuple[float, int, int, int]] = []  # (arrival, tie, worker, version)
        self._tie = itertools.count()
        for worker in range(workers):
            self._start_step(worker)

    def _start_step(self, worker: int) -> None:
        duration = self.step_s(worker, self.sync.progress, self.now)
        arrival = self.now + duration
        heapq.heappush(self._queue, (arrival, next(self._tie), worker, self.sync.live.version))

    def run(self) -> VirtualRun:
        while not self.sync.live.done:
            arrival, _, worker, version = heapq.heappop(self._queue)
            self.now = arrival
            gradient = Gradient(
                worker=worker,
                sequence=self.steps[worker],
                computed_version=version,
                values=torch.ones(3),
                samples=BATCH,
                loss=1.0,
                step_time_s=self.step_s(worker, self.sync.progress, arrival),
            )
            self.steps[worker] += 1
            outcome = self.sync.submit(gradient)
            reaction = self.monitor.after_gradient(self.sync, gradient)
            outcome.merge(reaction.outcome)
            self.outcome.merge(outcome)
            self.straggler_events.extend(reaction.straggler_events)
            self.policy_decisions.extend(reaction.decisions)
            for released in outcome.released:
                self._start_step(released)
        return self

    def decisions(self, action: str) -> list:
        return [d for d in self.policy_decisions if d.action == action]


def slowed(worker: int, start: float, end: float, factor: float = 5.0):
    """Worker `worker` runs `factor` times slower while progress is in [start, end)."""

    def step_s(w: int, progress: float, now: float) -> float:
        # A deterministic, mild spread so the workers are not in lockstep.
        base = STEP_S * (1 + 0.02 * w)
        return base * factor if w == worker and start <= progress < end else base

    return step_s


def test_elastic_excludes_a_5x_straggler_within_a_few_of_its_steps_and_readmits_it():
    run = VirtualRun("bsp:0.5,asp", StragglerPolicyKind.ELASTIC, slowed(3, 0.1, 0.3)).run()
    [exclude] = run.decisions("exclude")
    [readmit] = run.decisions("readmit")
    assert exclude.worker == readmit.worker == 3
    assert 0.1 < exclude.progress < readmit.progress
    # Under BSP every update waits for the straggler until it is excluded: about 8 batches
    # per update, so a few of its steps is a few hundredths of a percent of training here.
    assert exclude.progress - 0.1 < 0.03
    dropped = [d for d in run.outcome.dropped if d.reason == "straggler_excluded"]
    assert dropped and all(d.worker == 3 for d in dropped)
    # While excluded the barrier aggregated 7 gradients at 7/8 of the BSP learning rate.
    excluded_updates = [r for r in run.outcome.applied if r.protocol == "bsp" and r.lr < 0.1]
    assert excluded_updates and all(r.lr == pytest.approx(0.1 * 7 / 8) for r in excluded_updates)
    assert all(r.staleness == 0 for r in run.outcome.applied if r.protocol == "bsp")
    acct = run.sync.accounting()
    assert acct.sent == acct.applied + sum(acct.dropped.values()) + acct.waiting


def test_elastic_bsp_phase_is_faster_than_waiting_for_the_straggler():
    times = {}
    for policy in (StragglerPolicyKind.NONE, StragglerPolicyKind.ELASTIC):
        run = VirtualRun("bsp:0.5,asp", policy, slowed(3, 0.1, 0.4)).run()
        times[policy] = run.sync.live.time_by_protocol["bsp"]
    assert times[StragglerPolicyKind.ELASTIC] < times[StragglerPolicyKind.NONE] / 1.5


def test_greedy_switches_to_asp_and_never_returns_without_return():
    run = VirtualRun("bsp:0.5,asp", StragglerPolicyKind.GREEDY, slowed(3, 0.1, 0.2)).run()
    [switch] = run.decisions("switch")
    assert switch.protocol == ASP and 0.1 < switch.progress < 0.15
    assert run.decisions("return") == []
    assert [s.to_protocol for s in run.sync.live.switches] == ["asp"]
    assert run.sync.live.samples_by_protocol["bsp"] < 0.15 * run.sync.config.total_samples


def test_greedy_with_return_resumes_bsp_until_the_planned_bsp_work_is_done():
    total = 8 * BATCH * 400
    run = VirtualRun(
        "bsp:0.5,asp", StragglerPolicyKind.GREEDY, slowed(3, 0.1, 0.2), greedy_return=True
    ).run()
    assert len(run.decisions("switch")) == 1 and len(run.decisions("return")) == 1
    assert [s.to_protocol for s in run.sync.live.switches] == ["asp", "bsp", "asp"]
    bsp_samples = run.sync.live.samples_by_protocol["bsp"]
    # The planned BSP work is half the samples; it is done to within one BSP update.
    assert 0.5 * total <= bsp_samples < 0.5 * total + 8 * BATCH
    planned_switch = run.sync.live.switches[-1]
    assert planned_switch.reason == "schedule" and planned_switch.at_fraction > 0.5


def test_none_logs_detections_but_decides_nothing():
    run = VirtualRun("bsp:0.5,asp", StragglerPolicyKind.NONE, slowed(3, 0.1, 0.2)).run()
    kinds = [e.name for e in run.straggler_events]
    assert kinds[:2] == ["straggler_detected", "straggler_recovered"]
    assert run.policy_decisions == [] and run.sync.live.switches[0].reason == "schedule"


def test_detections_are_scored_against_the_emulated_scenario():
    scenario = StragglerScenario((StragglerEpisode((3,), start=0.1, duration=0.1, factor=5.0),))
    run = VirtualRun(
        "bsp", StragglerPolicyKind.ELASTIC, slowed(3, 0.1, 0.2), scenario=scenario
    ).run()
    detected, recovered = run.straggler_events[:2]
    assert detected.episode == 0 and detected.false_detection is False
    assert detected.delay_fraction is not None and 0 < detected.delay_fraction < 0.03
    assert detected.delay_s is not None and detected.delay_s > 0
    assert recovered.kind is EventKind.RECOVERED
    assert recovered.delay_s is not None and recovered.delay_s > 0
    # The results' layout: the detector's facts, then the scores it has, in this order.
    facts = ["event", "worker", "ratio", "time_s", "progress", "reason"]
    assert list(detected.to_plain()) == [
        *facts,
        *["episode", "false_detection", "delay_s", "delay_fraction"],
    ]
    assert list(recovered.to_plain()) == [*facts, "episode", "delay_s"]
    assert recovered.to_plain()["event"] == "straggler_recovered"
    assert run.monitor.audit is not None and run.monitor.audit.false_detections == 0


def test_a_detection_outside_every_episode_counts_as_false():
    # The scenario says worker 3 is slowed late in training, but it is slow early instead.
    scenario = StragglerScenario((StragglerEpisode((3,), start=0.8, duration=0.1, factor=5.0),))
    run = VirtualRun("bsp", StragglerPolicyKind.NONE, slowed(3, 0.1, 0.2), scenario=scenario).run()
    assert run.straggler_events[0].false_detection is True
    assert run.monitor.audit is not None and run.monitor.audit.false_detections == 1


def test_greedy_does_not_leave_bsp_pinned_by_a_divergence_rollback():
    run = VirtualRun("bsp:0.5,asp", StragglerPolicyKind.GREEDY, slowed(3, 0.1, 0.2))
    snapshot = run.sync.snapshot("test")
    run.sync.roll_back(
        snapshot.state,
        protocol=BSP,
        lr_scale=0.5,
        momentum_policy=MomentumPolicy.SCALE,
        reason="divergence",
    )
    run.run()
    assert run.decisions("switch") == []
    assert {s.to_protocol for s in run.sync.live.switches} <= {"bsp"}
    assert run.sync.live.samples_by_protocol["asp"] == 0
