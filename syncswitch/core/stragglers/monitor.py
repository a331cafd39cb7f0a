"""The straggler monitor: detector -> straggler policy -> decisions, one observed step at a time.

`StragglerMonitor.observe(step, run)` reads one worker step as a server saw it arrive (a
`StepObservation`), feeds its time to the detector, and lets the policy turn any detection into
`Decision` values with reasons. It decides; it does not act. The run controller observes the
steps that the first server shard reports and sends each decision to every shard, where
`carry_out` puts it in force at the shard's next version boundary, so all shards follow one
policy. `after_gradient` does both in one process (tests, or a single in-process synchronizer).

When the run's stragglers are emulated, the scenario is the ground truth: each detection is
scored against it (which episode it caught, how long after the episode began, or a false
detection when no episode was on). Nothing here knows about Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass, field, replace
from typing import Any

from syncswitch.core.stragglers.detector import (
    DetectorConfig,
    EventKind,
    StragglerDetector,
    StragglerEvent,
    StragglerRecord,
)
from syncswitch.core.stragglers.policies import RunView, StragglerPolicy, StragglerPolicyKind
from syncswitch.core.stragglers.scenarios import StragglerEpisode, StragglerScenario
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import (
    Action,
    Decision,
    EndOnlinePhase,
    Gradient,
    Outcome,
    StepObservation,
)
from syncswitch.core.sync.synchronizer import Synchronizer


@dataclass(frozen=True)
class StragglerMonitorConfig:
    policy: StragglerPolicyKind = StragglerPolicyKind.NONE
    greedy_return: bool = False
    detector: DetectorConfig = field(default_factory=DetectorConfig)

    def describe(self) -> dict[str, Any]:
        return {
            "policy": self.policy.value,
            "greedy_return": self.greedy_return,
            "detector": self.detector.describe(),
        }


@dataclass
class StragglerReaction:
    """What one observed step led to: detector events (as the results record them) and
    decisions; `outcome` is what carrying them out did, where `after_gradient` carried them out."""

    straggler_events: list[StragglerRecord] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    outcome: Outcome = field(default_factory=Outcome)


class DetectionAudit:
    """Scores detections against an emulated scenario, the ground truth of who is slow when."""

    def __init__(self, scenario: StragglerScenario) -> None:
        self._scenario = scenario
        # When (run seconds) each episode began and ended; fraction-timed episodes learn it
        # from the progress the run reports, seconds-timed ones know it already.
        self._began_s: dict[int, float] = {}
        self._ended_s: dict[int, float] = {}
        self.false_detections = 0

    def note_progress(self, progress: float, time_s: float) -> None:
        for index, episode in enumerate(self._scenario.episodes):
            start, end = _window(episode, progress, time_s)
            if index not in self._began_s and start:
                self._began_s[index] = time_s
            if index not in self._ended_s and end:
                self._ended_s[index] = time_s

    def score(self, event: StragglerEvent, progress: float, time_s: float) -> StragglerRecord:
        record = StragglerRecord.of(event)
        episodes = [
            (index, episode)
            for index, episode in enumerate(self._scenario.episodes)
            if event.worker in episode.workers
        ]
        if event.kind == EventKind.DETECTED:
            on = [(i, e) for i, e in episodes if e.active(progress, time_s)]
            if not on:
                self.false_detections += 1
                return replace(record, false_detection=True)
            index, episode = on[0]
            delay_s, delay_fraction = _delay(episode, self._began_s.get(index), progress, time_s)
            return replace(
                record,
                episode=index,
                false_detection=False,
                delay_s=delay_s,
                delay_fraction=delay_fraction,
            )
        ended = [i for i, _ in episodes if i in self._ended_s]
        if ended:
            index = max(ended, key=lambda i: self._ended_s[i])
            return replace(record, episode=index, delay_s=round(time_s - self._ended_s[index], 6))
        return record


def _window(episode: StragglerEpisode, progress: float, time_s: float) -> tuple[bool, bool]:
    """Whether the episode has begun, and whether it has ended, at this point of the run."""
    if episode.start is not None and episode.duration is not None:
        return progress >= episode.start, progress >= episode.start + episode.duration
    assert episode.start_s is not None and episode.duration_s is not None
    return time_s >= episode.start_s, time_s >= episode.start_s + episode.duration_s


def _delay(
    episode: StragglerEpisode, began_s: float | None, progress: float, time_s: float
) -> tuple[float | None, float | None]:
    """A detection's (delay_s, delay_fraction), each None where it cannot be known."""
    delay_s = delay_fraction = None
    if episode.start_s is not None:
        delay_s = round(time_s - episode.start_s, 6)
    elif began_s is not None:
        delay_s = round(time_s - began_s, 6)
    if episode.start is not None:
        delay_fraction = round(progress - episode.start, 6)
    return delay_s, delay_fraction


class StragglerMonitor:
    def __init__(
        self,
        workers: int,
        config: StragglerMonitorConfig,
        scenario: StragglerScenario | None = None,
    ) -> None:
        """`scenario`: the emulated stragglers, or None when step times are real."""
        self.config = config
        self.detector = StragglerDetector(workers, config.detector)
        self.policy = StragglerPolicy(config.policy, config.greedy_return)
        # With a scenario (emulated run) there is ground truth: even an empty one makes every
        # detection a false one. On real hardware (None) detections cannot be scored.
        self.audit = DetectionAudit(scenario) if scenario is not None else None

    def observe(
        self,
        step: StepObservation,
        run: RunView,
        act: Callable[[Decision], object] = lambda decision: None,
    ) -> StragglerReaction:
        """Detector events for one step (scored if emulated) and what the policy decides.

        `act` is called with each decision as it is made, so that the next one is decided on
        the run as the last one left it (the caller puts it in force, or updates its view).
        """
        reaction = StragglerReaction()
        if self.audit:
            self.audit.note_progress(step.progress, step.time_s)
        events = self.detector.observe(step.worker, step.step_time_s, step.time_s, step.progress)
        for event in events:
            reaction.straggler_events.append(
                self.audit.score(event, step.progress, step.time_s)
                if self.audit
                else StragglerRecord.of(event)
            )
            for decision in self.policy.decide(event, run, self.detector.stragglers):
                reaction.decisions.append(decision)
                act(decision)
        return reaction

    def after_gradient(self, sync: Synchronizer, gradient: Gradient) -> StragglerReaction:
        """Observe a gradient just submitted to `sync` and carry out the decisions on it."""
        step = StepObservation(gradient.worker, gradient.step_time_s, sync.now_s(), sync.progress)
        outcome = Outcome()
        view = SynchronizerView(sync)
        reaction = self.observe(step, view, lambda d: outcome.merge(carry_out(sync, d)))
        reaction.outcome = outcome
        return reaction

    def state(self) -> dict[str, Any]:
        return {
            "policy": self.policy.name,
            "flagged": sorted(self.detector.stragglers),
            "false_detections": self.audit.false_detections if self.audit else None,
        }


@dataclass(frozen=True)
class SynchronizerView:
    """A synchronizer as a straggler policy may read it (`RunView`), read afresh at each
    access: a decision carried out in place is in force for the next one."""

    sync: Synchronizer

    @property
    def spec(self) -> ProtocolSpec:
        return self.sync.live.spec

    @property
    def scheduled_spec(self) -> ProtocolSpec:
        return self.sync.scheduled_spec

    @property
    def excluded(self) -> Set[int]:
        return self.sync.live.excluded

    @property
    def done(self) -> bool:
        return self.sync.live.done

    @property
    def pinned(self) -> ProtocolSpec | None:
        return self.sync.live.pinned


def carry_out(sync: Synchronizer, decision: Decision) -> Outcome:
    """Put one decision (a straggler policy's, or online timing's `EndOnlinePhase`) in force on
    the synchronizer, if it still applies.

    A decision made elsewhere (the run controller) arrives a little later than it was made: a
    switch whose protocol is already in force, or one that a divergence rollback has since
    pinned out, or anything after the workload is done, is skipped.
    """
    action = decision.action
    if sync.live.done:
        return Outcome()
    if isinstance(decision, EndOnlinePhase):
        # The online phase ends (its next phase's protocol, unless a rollback pinned one).
        return sync.end_online_phase(
            reason=f"{decision.policy}: {decision.reason}", protocol=decision.protocol
        )
    if action in (Action.SWITCH, Action.RETURN):
        assert decision.protocol is not None
        target = decision.protocol
        if target == sync.live.spec or sync.live.pinned is not None:
            return Outcome()
        reason = f"{decision.policy} {action.value}: {decision.reason}"
        return sync.switch_to(target, reason=reason)
    assert decision.worker is not None
    if action is Action.EXCLUDE:
        return sync.exclude(decision.worker)
    return sync.readmit(decision.worker)
