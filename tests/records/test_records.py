"""The records shared by the synchronizer and the run directory (syncswitch.records): each
plain form written exactly as before the records were one class, and every layout a
checkpoint or a run directory holds read back."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from syncswitch.errors import RunDirError
from syncswitch.records import Accounting, Switch
from syncswitch.rundir import Switch as RunDirSwitch

SWITCH = Switch(0.123456789, 800, 25, "bsp", "asp", 1.23456789, 0.0004, "scheduled")


def _legacy_to_summary(s: Switch) -> dict[str, Any]:
    """Switch.to_plain() as it was written before the one record."""
    return {
        "at_fraction": round(s.at_fraction, 6),
        "at_samples": s.at_samples,
        "version": s.version,
        "from": s.from_protocol,
        "to": s.to_protocol,
        "time_s": round(s.time_s, 6),
        "overhead_s": s.overhead_s,
        "reason": s.reason,
    }


def test_one_class_under_every_name() -> None:
    assert Switch is RunDirSwitch


def test_each_switch_layout_is_written_as_before() -> None:
    assert json.dumps(SWITCH.to_plain()) == json.dumps(_legacy_to_summary(SWITCH))
    # A shard's state: dataclasses.asdict's layout, key order included.
    assert json.dumps(SWITCH.to_plain(state_layout=True)) == json.dumps(asdict(SWITCH))
    assert list(SWITCH.to_plain(state_layout=True)) == [
        "at_fraction",
        "at_samples",
        "version",
        "from_protocol",
        "to_protocol",
        "time_s",
        "overhead_s",
        "reason",
    ]
    # summary.json's: the summary layout as it is (built from the rounded switch).
    assert SWITCH.rounded().to_plain(rounded=False) == SWITCH.to_plain()
    early = Switch(0.5, 10, None, "bsp", "asp", 1.0)
    assert "version" not in early.to_plain(rounded=False)


def test_a_checkpoint_switch_reads_from_either_layout() -> None:
    rounded = SWITCH.rounded()
    assert Switch.from_plain(_legacy_to_summary(SWITCH)) == rounded
    assert Switch.from_plain(asdict(SWITCH)) == SWITCH
    with pytest.raises(KeyError):
        Switch.from_plain({"to": "asp"})


def test_a_run_directory_switch_is_checked_in_one_line() -> None:
    assert Switch.from_plain(SWITCH.to_plain(), "a switch") == SWITCH.rounded()
    assert Switch.from_plain(SWITCH.to_plain(state_layout=True), "a switch") == SWITCH
    early = {"at_fraction": 0.5, "at_samples": 10, "from": "bsp", "to": "asp", "time_s": 1.0}
    assert Switch.from_plain(early, "a switch") == Switch(0.5, 10, None, "bsp", "asp", 1.0)
    without_to = {k: v for k, v in early.items() if k != "to"}
    with pytest.raises(RunDirError, match="a switch: 'to' is missing") as error:
        Switch.from_plain(without_to, "a switch")
    assert "\n" not in str(error.value)


def test_accounting_is_summary_jsons_gradients() -> None:
    counts = Accounting(sent=5, applied=3, dropped={"stale": 1}, waiting=1, unaccounted=0)
    legacy = {"sent": 5, "applied": 3, "dropped": {"stale": 1}, "waiting": 1, "unaccounted": 0}
    assert json.dumps(counts.to_plain()) == json.dumps(legacy)
    assert json.dumps(Accounting().to_plain()) == json.dumps(
        {"sent": 0, "applied": 0, "dropped": {}, "waiting": 0, "unaccounted": 0}
    )
    assert Accounting.from_plain(legacy, "gradients") == counts
    early = Accounting.from_plain({"sent": 2, "applied": 2, "dropped": {}}, "gradients")
    assert early.unaccounted is None and "unaccounted" not in early.to_plain()
    assert counts.dropped_total == 1
