"""A complete Summary as a finished run writes it, for tests that need one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from syncswitch.records import Accounting
from syncswitch.records.metric import DEFAULT
from syncswitch.rundir import Reliability, Summary, Switch


def sample_summary(**changes: Any) -> Summary:
    """A finished BSP-then-ASP run on Ray with emulated timing; `changes` replace fields."""
    summary = Summary(
        status="complete",
        metric=DEFAULT,
        final_value=0.91,
        best_value=0.92,
        validation={"accuracy": 0.91, "loss": 0.31},
        test={"accuracy": 0.9, "loss": 0.33},
        best={"value": 0.92, "samples": 4000, "version": 120, "fraction": 0.8},
        test_weights="final",
        runtime="ray",
        wall_time_s=12.5,
        host_time_s=14.0,
        setup_time_s=1.5,
        samples=32000,
        samples_per_s=2560.0,
        updates=1500,
        updates_per_s=120.0,
        schedule="bsp:0.25,asp",
        schedule_source={"kind": "given"},
        time_by_protocol={"bsp": 5.0, "asp": 7.5},
        samples_by_protocol={"bsp": 8000, "asp": 24000},
        switches=(
            Switch(
                at_fraction=0.25,
                at_samples=8000,
                version=250,
                from_protocol="bsp",
                to_protocol="asp",
                time_s=5.0,
                overhead_s=0.0004,
                reason="scheduled",
            ),
        ),
        staleness={"bsp": {"mean": 0.0, "max": 0}, "asp": {"mean": 3.1, "max": 9}},
        gradients=Accounting(
            sent=2001, applied=2000, dropped={"stale": 1}, waiting=0, unaccounted=0
        ),
        workers=8,
        worker_step_time_mean_s=0.021,
        emulation={"enabled": True, "kind": "emulated device time", "step_time_ms": 20.0},
        cluster=None,
        online=None,
        reliability=Reliability(
            checkpoints=3,
            failures=[],
            rollbacks=0,
            pinned_protocol=None,
            lr_scale=1.0,
            guard_initial_loss=2.3,
            decisions=[],
            faults_injected=[],
        ),
        placement={"placement": "pack", "node_ids": ["ab12cd34"], "hosts": ["vm"]},
        run_dir="runs/x",
    )
    return replace(summary, **changes)
