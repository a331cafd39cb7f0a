"""events.jsonl's records (syncswitch.rundir.events): every kind's line is exactly what was
written before the records existed (keys, order, values), reads back to the same record, and
a malformed line of a kind a reader asks for is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from syncswitch.core.reliability.checkpoints import CheckpointInfo
from syncswitch.core.stragglers.detector import EventKind, StragglerRecord
from syncswitch.core.sync.protocol import ASP
from syncswitch.core.sync.records import Action, Decision
from syncswitch.core.timing.rules import OnlineSwitchDecision, TimingReason
from syncswitch.errors import RunDirError
from syncswitch.records import Switch
from syncswitch.records.failures import Resumption, ServerFailure, WorkerFailure
from syncswitch.rundir import events

SWITCH = Switch(0.250000123, 8000, 250, "bsp", "asp", 5.0000004, 0.0004, "scheduled")
DECISION = Decision(Action.SWITCH, "greedy", "worker 2 slow", 3.25, 0.4, worker=2, protocol=ASP)
STRAGGLERS = [
    StragglerRecord(EventKind.DETECTED, 3, 5.1, 0.5, 0.26, "slow", 0, False, 0.12, 0.06),
    StragglerRecord(EventKind.RECOVERED, 2, 1.01, 1.98, 0.8375, "back"),
]
WORKER = WorkerFailure(2, "died (killed)", 1, 0.2, 0.18, "restarted")
SERVER = ServerFailure("servers died", 0.6375, "restored from c-6.pt", 768, 48, ("c-7.pt: x",))
RESUMED = Resumption({"file": "c-6.pt", "samples": 768, "meta": {"progress": 0.6}}, ("c: y",))
CHECKPOINT = CheckpointInfo(
    sequence=4,
    path=Path("ckpt/c-4.pt"),
    manifest_path=Path("ckpt/c-4.json"),
    sha256="ab" * 32,
    bytes=1234,
    samples=640,
    label="periodic",
    created_unix_s=1765000000.123456,
    meta={"progress": 0.25, "version": 80, "time_s": 1.5},
)
TIMING = OnlineSwitchDecision(True, TimingReason.SIGNAL, "noise-scale", 0.4, {"noise_scale": 1.5})
STARTED: dict[str, Any] = {
    "workers": 4,
    "servers": 2,
    "schedule": "bsp:0.25,asp",
    "total_samples": 3200,
    "parameters": 1234,
    "runtime": "sim",
    "emulation": {"enabled": False},
    "online": None,
    "faults": None,
}


def _legacy_lines() -> list[tuple[events.RunEvent, str]]:
    """Each event beside the line RunWriter.event(kind, payload) wrote for it before."""
    straggler_lines = []
    for record in STRAGGLERS:
        payload = record.to_plain()
        straggler_lines.append(
            (
                events.StragglerChanged.from_plain(record.to_plain()),
                (payload.pop("event"), payload),
            )
        )
    pairs: list[tuple[events.RunEvent, tuple[str, dict[str, Any]]]] = [
        (events.RunStarted(**STARTED), ("run_started", STARTED)),
        (
            events.RunResumed(RESUMED),
            ("run_resumed", RESUMED.event()),
        ),
        (events.ProtocolSwitched(SWITCH), ("switch", SWITCH.to_plain())),
        (
            events.DecisionMade.from_plain(DECISION.to_plain()),
            ("decision", DECISION.to_plain()),
        ),
        (
            events.WorkerFailed(WORKER),
            ("worker_failed", WORKER.to_plain()),
        ),
        (
            events.WorkerHung(1, 31.5, 30.0),
            ("worker_hung", {"worker": 1, "silent_s": 31.5, "timeout_s": 30.0}),
        ),
        (
            events.ServerFailed(SERVER),
            ("server_failed", SERVER.to_plain()),
        ),
        *straggler_lines,
        (
            events.CheckpointWritten.from_plain(CHECKPOINT.to_plain()),
            ("checkpoint", CHECKPOINT.to_plain()),
        ),
        (
            events.OnlineTimingDecided(
                **TIMING.to_plain(), samples=1280, time_s=2.0, to="asp", describe=TIMING.describe()
            ),
            (
                "online_timing",
                {
                    **TIMING.to_plain(),
                    "samples": 1280,
                    "time_s": 2.0,
                    "to": "asp",
                    "describe": TIMING.describe(),
                },
            ),
        ),
        (
            events.Placement({"placement": "pack", "hosts": ["vm"]}),
            ("placement", {"placement": "pack", "hosts": ["vm"]}),
        ),
        (
            events.LoggerFailed("mlflow", "down"),
            ("logger_failed", {"logger": "mlflow", "reason": "down"}),
        ),
    ]
    return [
        (event, json.dumps({"event": kind, **payload}) + "\n") for event, (kind, payload) in pairs
    ]


@pytest.mark.parametrize(("event", "legacy"), _legacy_lines(), ids=lambda v: getattr(v, "name", ""))
def test_every_kind_writes_the_line_it_always_wrote_and_reads_it_back(event, legacy) -> None:
    assert events.to_line(event) == legacy
    [back] = events.of_kind([json.loads(legacy)], type(event))
    if isinstance(event, events.ProtocolSwitched):
        assert back.switch == SWITCH.rounded()  # the line holds the rounded switch
    else:
        assert back == event
    assert events.to_line(back) == legacy


def test_every_kind_the_writers_use_has_a_legacy_line() -> None:
    kinds = {name for event, _ in _legacy_lines() for name in type(event).EVENTS}
    written = {name for cls in events.RunEvent.__subclasses__() for name in cls.EVENTS}
    assert kinds == written


def test_a_reader_gets_only_the_kind_it_asks_for_and_skips_the_others_unparsed() -> None:
    lines = [
        {"event": "checkpoint", "file": 3},  # malformed, but no one asked for checkpoints
        {"event": "switch", **SWITCH.to_plain()},
        {"event": "something_newer", "x": 1},
        {"event": "straggler_detected", "worker": 1, "time_s": 0.5},  # an early run's line
    ]
    assert [e.switch for e in events.of_kind(lines, events.ProtocolSwitched)] == [SWITCH.rounded()]
    [mark] = events.of_kind(lines, events.StragglerChanged)
    assert mark.detected and mark.worker == 1 and mark.progress is None and mark.ratio is None


@pytest.mark.parametrize(
    ("line", "kind", "noun"),
    [
        (
            {"event": "switch", "at_fraction": 0.5, "at_samples": "many"},
            events.ProtocolSwitched,
            "a switch record",
        ),
        (
            {"event": "straggler_recovered", "worker": "w", "time_s": 1.0},
            events.StragglerChanged,
            "a straggler event",
        ),
        (
            {"event": "straggler_detected", "worker": 1},
            events.StragglerChanged,
            "a straggler event",
        ),
        ({"event": "worker_hung", "worker": 1}, events.WorkerHung, "a worker_hung event"),
    ],
)
def test_a_malformed_line_is_refused_in_one_line(line, kind, noun) -> None:
    with pytest.raises(RunDirError, match=f"events.jsonl: {noun} is malformed") as error:
        events.of_kind([line], kind)
    assert "\n" not in str(error.value)


def test_an_online_timing_line_of_0_2_reads_its_rule_under_the_flags_name() -> None:
    # 0.2 and before wrote the rule as staleness_noise; one name (`--switch-rule`'s) is read.
    old = {**TIMING.to_plain(), "rule": "staleness_noise", "samples": 1, "time_s": 0.5}
    line = {"event": "online_timing", **old, "to": "asp", "describe": "switch at 0.400"}
    (read,) = events.of_kind([line], events.OnlineTimingDecided)
    assert read.rule == "staleness"
