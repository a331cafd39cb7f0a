"""events.jsonl: one small frozen record per event kind, its payload beside it. Every line is
written by `to_line` and read by `of_kind`, here and nowhere else.

A line is `{"event": NAME, **payload}`, with the keys and their order each kind has always
had; the kinds (and who writes them):

    run_started          RunStarted          the controller, a new run
    run_resumed          RunResumed          the controller, a run resumed from a checkpoint
    switch               ProtocolSwitched    the controller, a shard's protocol switch
    decision             DecisionMade        the controller, a policy's or the guard's decision
    worker_failed        WorkerFailed        HealthChecks, a worker died and is restarted
    worker_hung          WorkerHung          HealthChecks, a silent worker is killed
    server_failed        ServerFailed        the controller, servers restored from a checkpoint
    straggler_detected   StragglerChanged    StragglerResponse, the straggler detector
    straggler_recovered  StragglerChanged
    checkpoint           CheckpointWritten   CheckpointKeeper
    online_timing        OnlineTimingDecided OnlineTiming, where an online phase ends
    placement            Placement           the controller, where the actors run
    logger_failed        LoggerFailed        RunWriter, a logger backend switched off

Several payloads are the plain form of a record a layer above owns (a failure, a decision,
a checkpoint's manifest entry): their event is built from that form (`from_plain`), so the
line holds exactly what the record writes. Readers ask for the kinds they use
(`of_kind(lines, ProtocolSwitched)`); a malformed line of such a kind is one RunDirError line,
and kinds nobody asks for are never parsed, so a run directory of any earlier version reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Self, TypeVar, cast

from syncswitch.errors import RunDirError
from syncswitch.records import Switch
from syncswitch.records.failures import Resumption, ServerFailure, WorkerFailure
from syncswitch.records.switch import rule_name
from syncswitch.rundir import names
from syncswitch.rundir.parsing import finite, short


class RunEvent:
    """One line of events.jsonl. By default the payload is the fields, in their order."""

    EVENTS: ClassVar[tuple[str, ...]]  # the line's "event" values this kind is written under
    NOUN: ClassVar[str] = ""  # how an error names a malformed one ("a switch record")

    @property
    def name(self) -> str:
        """The line's "event" value."""
        return self.EVENTS[0]

    def to_plain(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(cast(Any, self))}

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        """Back from a line (or from the plain form the payload is made of); raises KeyError,
        TypeError or ValueError on a malformed one."""
        return cast(
            Self, cast(Any, cls)(**{f.name: record[f.name] for f in fields(cast(Any, cls))})
        )

    @classmethod
    def noun(cls) -> str:
        return cls.NOUN or f"a {cls.EVENTS[0]} event"


E = TypeVar("E", bound=RunEvent)


def to_line(event: RunEvent) -> str:
    """The event's line in events.jsonl, newline included."""
    return json.dumps({"event": event.name, **event.to_plain()}) + "\n"


def of_kind(lines: Iterable[Mapping[str, Any]], kind: type[E]) -> list[E]:
    """The events of one kind among events.jsonl's lines (as `read_events` gives them), in
    order; a malformed one is one RunDirError line naming the file and showing it."""
    found = []
    for line in lines:
        if line.get("event") not in kind.EVENTS:
            continue
        try:
            found.append(kind.from_plain(line))
        except (KeyError, TypeError, ValueError, RunDirError):
            raise RunDirError(
                f"{names.EVENTS}: {kind.noun()} is malformed: {short(line)}"
            ) from None
    return found


# -- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStarted(RunEvent):
    EVENTS = ("run_started",)

    workers: int
    servers: int
    schedule: str
    total_samples: int
    parameters: int
    runtime: str
    emulation: dict[str, Any]  # the timing label
    online: dict[str, Any] | None  # the straggler policy, described (key: old files)
    faults: list[dict[str, Any]] | None  # the injected faults, described


@dataclass(frozen=True)
class RunResumed(RunEvent):
    """The run went on from a checkpoint: the failure entry's payload, without its kind."""

    EVENTS = ("run_resumed",)

    resumption: Resumption

    def to_plain(self) -> dict[str, Any]:
        return self.resumption.event()

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        return cls(Resumption.from_plain(dict(record)))


@dataclass(frozen=True)
class Placement(RunEvent):
    """Where the actors run, as the runtime describes it: the payload is its description."""

    EVENTS = ("placement",)

    placement: dict[str, Any]

    def to_plain(self) -> dict[str, Any]:
        return dict(self.placement)

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        return cls({k: v for k, v in record.items() if k != "event"})


@dataclass(frozen=True)
class CheckpointWritten(RunEvent):
    """A checkpoint written: its manifest entry (CheckpointInfo.to_plain())."""

    EVENTS = ("checkpoint",)

    file: str
    sequence: int
    samples: int
    label: str
    bytes: int
    sha256: str
    created_unix_s: float
    meta: dict[str, Any]


# -- training -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProtocolSwitched(RunEvent):
    """A shard's protocol switch: the switch record's summary layout (rounded)."""

    EVENTS = ("switch",)
    NOUN = "a switch record"

    switch: Switch

    def to_plain(self) -> dict[str, Any]:
        return self.switch.to_plain()

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        return cls(Switch.from_plain(dict(record), "a switch"))


@dataclass(frozen=True)
class DecisionMade(RunEvent):
    """A policy's, the guard's or admission's decision (Decision.to_plain())."""

    EVENTS = ("decision",)

    action: str
    policy: str
    worker: int | None
    protocol: str | None
    time_s: float
    progress: float
    reason: str


@dataclass(frozen=True)
class StragglerChanged(RunEvent):
    """A straggler detection or recovery (StragglerRecord.to_plain(), its name the line's
    "event"). The scores are there only where the stragglers were emulated; a reader needs
    only the worker and the time."""

    EVENTS = ("straggler_detected", "straggler_recovered")
    NOUN = "a straggler event"

    kind: str  # "detected" or "recovered"
    worker: int
    time_s: float
    ratio: float | None = None
    progress: float | None = None
    reason: str | None = None
    episode: int | None = None
    false_detection: bool | None = None
    delay_s: float | None = None
    delay_fraction: float | None = None

    @property
    def name(self) -> str:
        return f"straggler_{self.kind}"

    @property
    def detected(self) -> bool:
        return self.kind == "detected"

    def to_plain(self) -> dict[str, Any]:
        order = ("worker", "ratio", "time_s", "progress", "reason", "episode")
        keys = (*order, "false_detection", "delay_s", "delay_fraction")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        name = str(record["event"])
        false_detection = record.get("false_detection")
        if false_detection is not None and type(false_detection) is not bool:
            raise ValueError(f"false_detection = {false_detection!r}")
        progress = record.get("progress")
        return cls(
            kind=name.removeprefix("straggler_"),
            worker=int(record["worker"]),
            time_s=finite(record["time_s"]),
            ratio=_optional(record, "ratio", float),
            progress=None if progress is None else finite(progress, allow_nan=True),
            reason=_optional(record, "reason", str),
            episode=_optional(record, "episode", int),
            false_detection=false_detection,
            delay_s=_optional(record, "delay_s", float),
            delay_fraction=_optional(record, "delay_fraction", float),
        )


@dataclass(frozen=True)
class OnlineTimingDecided(RunEvent):
    """Where an online phase ends: the decision (OnlineSwitchDecision.to_plain()), then where the
    run was, the protocol it switches to and the decision in one line."""

    EVENTS = ("online_timing",)

    switch: bool
    reason: str
    rule: str
    progress: float
    values: dict[str, float]
    samples: int
    time_s: float
    to: str
    describe: str
    # `--schedule online`: the phase chosen to follow BSP and what it was chosen from
    # (core/timing/follower.py); None where the schedule names it.
    follower: dict[str, Any] | None = None

    def to_plain(self) -> dict[str, Any]:
        plain = super().to_plain()
        if plain["follower"] is None:
            del plain["follower"]  # the line a run whose schedule names the follower always wrote
        return plain

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        # `follower` is absent from the lines of runs before the choice; the rule reads under
        # `--switch-rule`'s name (0.2 and before wrote staleness_noise, noise_scale, ...).
        event = super().from_plain({"follower": None, **record})
        return replace(event, rule=rule_name(str(event.rule)))


# -- failures -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerFailed(RunEvent):
    """A worker died or hung and is restarted: the failure entry, its kind included."""

    EVENTS = ("worker_failed",)

    failure: WorkerFailure

    def to_plain(self) -> dict[str, Any]:
        return self.failure.to_plain()

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        return cls(WorkerFailure.from_plain(dict(record)))


@dataclass(frozen=True)
class WorkerHung(RunEvent):
    EVENTS = ("worker_hung",)

    worker: int
    silent_s: float
    timeout_s: float


@dataclass(frozen=True)
class ServerFailed(RunEvent):
    """The servers were lost and restored from a checkpoint: the failure entry, its kind
    included."""

    EVENTS = ("server_failed",)

    failure: ServerFailure

    def to_plain(self) -> dict[str, Any]:
        return self.failure.to_plain()

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        return cls(ServerFailure.from_plain(dict(record)))


@dataclass(frozen=True)
class LoggerFailed(RunEvent):
    """A logger backend failed mid-run and was switched off; the run went on."""

    EVENTS = ("logger_failed",)

    logger: str
    reason: str

    @classmethod
    def from_plain(cls, record: Mapping[str, Any]) -> Self:
        # As read before it had a record: whatever the line says, shown as text.
        return cls(str(record.get("logger")), str(record.get("reason")))


def _optional(record: Mapping[str, Any], key: str, kind: type) -> Any:
    value = record.get(key)
    return None if value is None else kind(value)
