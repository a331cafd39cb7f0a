"""A simulated run on a cluster with no step-time variance says that every schedule takes
about the same SIMULATED time there, and how to see the difference (issue 47)."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncswitch.cli.main import main

SMALL = ["--runtime", "sim", "--workers", "4", "--epochs", "1", "--mnist1d-samples", "400"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ([], True),
        (["--jitter-sigma", "0.2"], False),
        (["--speed-factors", "1,1,1,2"], False),
        (["--cluster", "wan-1g"], False),  # costly messages: schedules differ in time anyway
    ],
)
def test_a_cluster_without_step_time_variance_is_said_to_be_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], said: bool
) -> None:
    out = tmp_path / "run"
    assert (
        main(["train", *SMALL, *flags, "--schedule", "bsp", "--no-progress", "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert ("no step-time variance" in printed) is said
    if said:
        assert "--jitter-sigma 0.2" in printed and "SIMULATED" in printed
