"""summary.json's online_timing: its round trip, and a hostile one refused in one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from syncswitch.errors import RunDirError
from syncswitch.rundir import OnlineTimingSummary, Summary, names, read_summary
from tests.rundir.samples import sample_summary

TIMING = OnlineTimingSummary(
    rule="staleness",
    threshold=0.35,
    floor=0.0625,
    ceiling=0.875,
    switched=True,
    at_fraction=0.5,
    decided_at=0.502,
    at_samples=1000,
    time_s=3.5,
    to_protocol="asp",
    reason="signal",
    describe="switch at 0.502 (staleness: signal; staleness_ratio 0.3)",
    values={"staleness_ratio": 0.3, "drift_sq": None},
    checks=100,
)


def test_online_timing_round_trips() -> None:
    summary = replace(sample_summary(), online_timing=TIMING)
    assert Summary.from_plain(json.loads(json.dumps(summary.to_plain()))) == summary


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda t: t.update(at_fraction=2.0), "online_timing: at_fraction"),
        (lambda t: t.update(values={"x": "high"}), "online_timing: values"),
        (lambda t: t.pop("rule"), "online_timing: 'rule' is missing"),
    ],
)
def test_a_hostile_online_timing_is_one_line(tmp_path, change, fragment) -> None:
    data = replace(sample_summary(), online_timing=TIMING).to_plain()
    change(data["online_timing"])
    (tmp_path / names.CONFIG).write_text("{}")
    (tmp_path / names.SUMMARY).write_text(json.dumps(data))
    with pytest.raises(RunDirError) as error:
        read_summary(tmp_path)
    assert fragment in str(error.value) and "\n" not in str(error.value)
