"""What a report draws from events.jsonl and config.json: switches, straggler marks and the
emulated straggler episodes, each checked as it is built (one RunDirError line otherwise)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from syncswitch.errors import RunDirError
from syncswitch.rundir import names
from syncswitch.rundir.events import ProtocolSwitched, StragglerChanged, of_kind
from syncswitch.rundir.parsing import optional_float, short
from syncswitch.rundir.summary import Summary, Switch


@dataclass(frozen=True)
class StragglerMark:
    """A detection or recovery the run's straggler detector logged."""

    kind: str  # "detected" or "recovered"
    worker: int
    time_s: float
    progress: float
    false_detection: bool | None


@dataclass(frozen=True)
class Episode:
    """An emulated straggler episode as config.json records it (fractions or seconds)."""

    workers: tuple[int, ...]
    start: float | None
    duration: float | None
    start_s: float | None
    duration_s: float | None
    delay_ms: float | None
    factor: float | None

    def describe(self) -> str:
        when = (
            f"{self.start:.0%}-{self.start + self.duration:.0%} of samples"
            if self.start is not None and self.duration is not None
            else f"{self.start_s:g}-{(self.start_s or 0) + (self.duration_s or 0):g} s"
        )
        slow = f"+{self.delay_ms:g} ms" if self.delay_ms is not None else f"x{self.factor:g}"
        return f"{slow} at {when}"


def switches_of(events: list[dict[str, Any]], summary: Summary | None) -> list[Switch]:
    # events.jsonl has every switch as it happened (also for a killed run); summary.json
    # only as of its last rewrite.
    switches = [event.switch for event in of_kind(events, ProtocolSwitched)]
    if not switches and summary is not None:
        return list(summary.switches)
    return switches


def straggler_marks(events: list[dict[str, Any]]) -> list[StragglerMark]:
    return [
        StragglerMark(
            kind=event.kind,
            worker=event.worker,
            time_s=event.time_s,
            progress=math.nan if event.progress is None else event.progress,
            false_detection=event.false_detection,
        )
        for event in of_kind(events, StragglerChanged)
    ]


def episodes(config: dict[str, Any]) -> list[Episode]:
    emulation = config.get("emulation")
    listed = emulation.get("stragglers") if isinstance(emulation, dict) else None
    if not isinstance(listed, list):
        return []  # "none", or a run without emulation
    episodes = []
    for item in listed:
        try:
            workers = tuple(int(w) for w in item["workers"])
            episodes.append(
                Episode(
                    workers=workers,
                    **{
                        name: optional_float(item.get(name))
                        for name in (
                            "start",
                            "duration",
                            "start_s",
                            "duration_s",
                            "delay_ms",
                            "factor",
                        )
                    },
                )
            )
        except (KeyError, TypeError, ValueError):
            raise RunDirError(
                f"{names.CONFIG}: a straggler episode is malformed: {short(item)}"
            ) from None
    return episodes
