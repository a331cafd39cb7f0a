"""A run whose planned schedule was changed (a rollback, a pinned protocol, an online phase
ended by its ceiling) says so: in the terminal's headline and in `report`'s runs table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from syncswitch.records.metric import DEFAULT
from syncswitch.reports.overview import RunOverview
from syncswitch.reports.tables import RUN_COLUMNS, runs_table
from syncswitch.run_summary import summary_table
from syncswitch.rundir import Reliability
from syncswitch.rundir.changes import schedule_changes
from syncswitch.rundir.summary import OnlineTimingSummary
from tests.rundir.samples import sample_summary

ROLLBACK = {"action": "rollback", "policy": "divergence_guard", "progress": 0.2692}
ROLLED_BACK = Reliability(
    checkpoints=20, failures=[], rollbacks=1, pinned_protocol="bsp", decisions=[ROLLBACK]
)


def test_a_run_as_planned_has_no_changes() -> None:
    assert schedule_changes(sample_summary()) == ()
    assert schedule_changes(None) == ()


def test_a_rollback_that_pinned_bsp_is_a_change() -> None:
    summary = sample_summary(reliability=ROLLED_BACK)
    assert schedule_changes(summary) == (
        "rolled back once at 27% by the divergence guard, then BSP to the end",
    )


def test_an_online_phase_ended_by_its_ceiling_is_a_change() -> None:
    timing = OnlineTimingSummary(
        rule="staleness", threshold=0.15, floor=0.0625, ceiling=0.875,
        switched=True, at_fraction=0.875, reason="ceiling",
    )  # fmt: skip
    (change,) = schedule_changes(sample_summary(schedule="online", online_timing=timing))
    assert change == "online timing left BSP at its ceiling at 88% (the signal never crossed)"
    signal = replace(timing, reason="signal", at_fraction=0.36)
    assert schedule_changes(sample_summary(online_timing=signal)) == ()


def test_the_terminal_headline_says_the_schedule_changed() -> None:
    changed = summary_table(sample_summary(reliability=ROLLED_BACK), Path("r"), library_log=None)
    assert str(changed.title).startswith(
        "run complete, schedule changed: rolled back once at 27% by the divergence guard"
    )
    kept = summary_table(sample_summary(), Path("r"), library_log=None)
    assert str(kept.title).startswith("run complete: bsp:0.25,asp")


def _overview(label: str, changes: tuple[str, ...]) -> RunOverview:
    return RunOverview(
        label=label, status="complete", status_detail="complete", schedule="bsp:0.25,asp",
        runtime="sim", timing="simulated", dataset="mnist1d (mlp)", workers=8, epochs=1.0,
        job=(), metric=DEFAULT, final_value=0.9, measured_at_fraction=1.0, best_value=0.9,
        test_value=None,
        wall_time_s=1.0, samples=100, samples_per_s=100.0, switches=(), switch_overhead_s=0.0,
        dropped=0, time_by_protocol_s={}, notes=(), schedule_changes=changes,
    )  # fmt: skip


def test_the_report_table_says_which_runs_did_not_run_as_planned() -> None:
    table = runs_table([_overview("kept", ()), _overview("rolled", ("rolled back once",))])
    column = RUN_COLUMNS.index("as planned")
    assert [row[column] for row in table.rows] == ["yes", "no (see notes)"]
    assert "rolled: schedule changed: rolled back once" in table.notes


def test_the_summary_shows_the_online_signal_once_and_says_what_the_ms_are() -> None:
    from syncswitch.records import Switch
    from syncswitch.run_summary import _switches

    online = Switch(
        at_fraction=0.36, at_samples=100, version=9, from_protocol="bsp", to_protocol="asp",
        time_s=1.0, overhead_s=0.00015,
        reason="online_timing: switch at 0.360 (staleness: signal; staleness_ratio 0.1)",
    )  # fmt: skip
    text = _switches((online,))
    assert text == "bsp>asp at 36.0% (online timing, see below; in force in 0.15 ms)"
