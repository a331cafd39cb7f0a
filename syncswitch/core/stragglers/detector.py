"""Online straggler detection from per-worker step times.

A worker is a straggler when its recent median step time is well above what the other workers
take right now. Both sides use medians, so one jittery step, or one slow peer in the
reference, moves nothing. A flip between "slow" and "fine" needs `patience` consecutive
evaluations past a threshold, and recovery uses a lower threshold than detection, so a worker
whose ratio hovers near one threshold does not flap.

At most half the workers (rounded down) are ever flagged at once: the reference is the
median of the others, and once more than half are slow that median is itself a slow worker,
so "slower than the others" no longer says anything. A worker that qualifies while the cap is
full stays pending and is flagged on its next evaluation after a slot frees.

The scoring math lives in pure functions so a simulator can reuse it without a detector.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class EventKind(StrEnum):
    DETECTED = "detected"
    RECOVERED = "recovered"


@dataclass(frozen=True)
class DetectorConfig:
    # Recent steps per worker considered. 9, not 5: with 20 ms steps and lognormal jitter
    # sigma=0.2 a window of 5 gave about 5 false detections per 80,000 steps (3 jittery steps
    # of 5 above 1.5x is not rare), a window of 9 none in 4 million; a 5x slowdown is still
    # flagged on its 6th step.
    window: int = 9
    # Slow when the worker's recent median step time > threshold x the median of the OTHER
    # workers' recent medians.
    threshold: float = 1.5
    recover_threshold: float = 1.2  # hysteresis: recovered when the ratio drops below this
    # No decision for a worker with fewer recent steps; a median of 3 flips on 2 jittery steps.
    min_steps: int = 5
    patience: int = 2  # consecutive slow (or recovered) evaluations needed to flip state

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"detector window {self.window} must be >= 1 step")
        if not 1 <= self.min_steps <= self.window:
            raise ValueError(
                f"detector min_steps {self.min_steps} must be between 1 and the window "
                f"({self.window})"
            )
        if not self.threshold > 1:
            raise ValueError(f"detector threshold {self.threshold} must be > 1")
        if not 0 < self.recover_threshold <= self.threshold:
            raise ValueError(
                f"detector recover_threshold {self.recover_threshold} must be > 0 and <= the "
                f"threshold ({self.threshold})"
            )
        if self.patience < 1:
            raise ValueError(f"detector patience {self.patience} must be >= 1")

    def describe(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "threshold": self.threshold,
            "recover_threshold": self.recover_threshold,
            "min_steps": self.min_steps,
            "patience": self.patience,
            "score": "recent median step time / median of the other workers' recent medians",
        }


@dataclass(frozen=True)
class StragglerEvent:
    kind: str  # an EventKind value: "detected" or "recovered"
    worker: int
    ratio: float  # the score that triggered it
    time_s: float
    progress: float
    reason: str


def reference_step_s(others: Sequence[float]) -> float | None:
    """The typical step time of the other workers, or None when there is nothing to compare."""
    return statistics.median(others) if others else None


def slowdown_ratio(own: float, others: Sequence[float]) -> float:
    """How many times slower `own` is than the median of `others`.

    1.0 means "no evidence either way": no peers, or a reference of zero (emulation off and a
    step too short to time), where any ratio would be noise.
    """
    reference = reference_step_s(others)
    if reference is None or reference <= 0:
        return 1.0
    return own / reference


def max_stragglers(workers: int) -> int:
    """The most workers that may be flagged at once; see the module docstring for why."""
    return workers // 2


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


class StragglerDetector:
    """Flags and unflags stragglers as step times arrive, one worker's step at a time.

    Only the reporting worker is evaluated on each observation: its patience then counts its
    own steps, and a flagged worker's recovery shows up in its own next steps anyway.
    """

    def __init__(self, workers: int, config: DetectorConfig = DetectorConfig()) -> None:
        if workers < 1:
            raise ValueError(f"detector needs at least 1 worker, got {workers}")
        self._workers = workers
        self._config = config
        self._steps: list[deque[float]] = [deque(maxlen=config.window) for _ in range(workers)]
        # Cached so one observation costs one median of the window, not one per worker.
        self._medians: list[float | None] = [None] * workers
        self._streaks = [0] * workers  # consecutive evaluations pointing at a state flip
        self._flagged: set[int] = set()

    @property
    def config(self) -> DetectorConfig:
        return self._config

    @property
    def stragglers(self) -> frozenset[int]:
        return frozenset(self._flagged)

    def observe(
        self, worker: int, step_time_s: float, time_s: float, progress: float
    ) -> list[StragglerEvent]:
        """Record one step of `worker`; returns the events it caused (at most one)."""
        if not 0 <= worker < self._workers:
            raise ValueError(f"worker {worker} out of range 0..{self._workers - 1}")
        if not (math.isfinite(step_time_s) and step_time_s >= 0):
            raise ValueError(f"step time {step_time_s!r} s of worker {worker} must be >= 0")
        cfg = self._config
        window = self._steps[worker]
        window.append(step_time_s)
        if len(window) < cfg.min_steps:
            return []
        own = statistics.median(window)
        self._medians[worker] = own
        others = [m for w, m in enumerate(self._medians) if w != worker and m is not None]
        reference = reference_step_s(others)
        if reference is None or reference <= 0:
            return []
        ratio = own / reference
        flagged = worker in self._flagged
        pointing_at_flip = ratio < cfg.recover_threshold if flagged else ratio > cfg.threshold
        if not pointing_at_flip:
            # A ratio between the two thresholds keeps the current state and breaks any streak.
            self._streaks[worker] = 0
            return []
        self._streaks[worker] += 1
        if self._streaks[worker] < cfg.patience:
            return []
        if flagged:
            self._flagged.discard(worker)
            kind = EventKind.RECOVERED
            verdict = f"below recovery threshold {cfg.recover_threshold:g}x"
        else:
            if len(self._flagged) >= max_stragglers(self._workers):
                return []  # the streak stays, so it is flagged once a slot frees
            self._flagged.add(worker)
            kind = EventKind.DETECTED
            verdict = f"threshold {cfg.threshold:g}x"
        self._streaks[worker] = 0
        reason = (
            f"worker {worker} median step {_ms(own)} = {ratio:.2f}x the others' "
            f"{_ms(reference)} ({verdict})"
        )
        return [StragglerEvent(kind.value, worker, ratio, time_s, progress, reason)]


@dataclass(frozen=True)
class StragglerRecord:
    """A straggler detection or recovery as the run records it (events.jsonl, summary.json's
    online.straggler_events, a checkpointed run record). Where the stragglers are emulated it
    is scored against them (core/stragglers/monitor.py DetectionAudit); the scores are None
    otherwise."""

    kind: EventKind
    worker: int
    ratio: float  # the score that triggered it
    time_s: float
    progress: float
    reason: str
    episode: int | None = None  # the emulated episode it belongs to
    false_detection: bool | None = None  # a detection: whether no episode of its worker was on
    delay_s: float | None = None  # seconds after its episode began (detected) or ended
    delay_fraction: float | None = None  # a detection: fractions of the run after it began

    @classmethod
    def of(cls, event: StragglerEvent) -> StragglerRecord:
        """The detector's event, not yet scored (rounded as the records show it)."""
        return cls(
            kind=EventKind(event.kind),
            worker=event.worker,
            ratio=round(event.ratio, 3),
            time_s=round(event.time_s, 6),
            progress=round(event.progress, 6),
            reason=event.reason,
        )

    @property
    def name(self) -> str:
        """The event's name in events.jsonl: straggler_detected or straggler_recovered."""
        return f"straggler_{self.kind.value}"

    def to_plain(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "event": self.name,
            "worker": self.worker,
            "ratio": self.ratio,
            "time_s": self.time_s,
            "progress": self.progress,
            "reason": self.reason,
        }
        scores = (
            ("episode", self.episode),
            ("false_detection", self.false_detection),
            ("delay_s", self.delay_s),
            ("delay_fraction", self.delay_fraction),
        )
        record.update((key, value) for key, value in scores if value is not None)
        return record

    @classmethod
    def from_plain(cls, record: dict[str, Any]) -> StragglerRecord:
        """Back from `to_plain()` (a checkpointed run record); raises on a malformed one."""
        name = record["event"]
        if not isinstance(name, str) or not name.startswith("straggler_"):
            raise ValueError(f"a straggler event is named {name!r}")
        episode, false_detection = record.get("episode"), record.get("false_detection")
        delay_s, delay_fraction = record.get("delay_s"), record.get("delay_fraction")
        if false_detection is not None and type(false_detection) is not bool:
            raise ValueError(f"a straggler event has false_detection = {false_detection!r}")
        return cls(
            kind=EventKind(name.removeprefix("straggler_")),
            worker=int(record["worker"]),
            ratio=float(record["ratio"]),
            time_s=float(record["time_s"]),
            progress=float(record["progress"]),
            reason=str(record["reason"]),
            episode=None if episode is None else int(episode),
            false_detection=false_detection,
            delay_s=None if delay_s is None else float(delay_s),
            delay_fraction=None if delay_fraction is None else float(delay_fraction),
        )
