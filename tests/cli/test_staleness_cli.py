"""Staleness-aware ASP at the command line: bad values and moot options refused in one line,
the rule in force said at start-up and in the terminal summary."""

import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from tests.security.helpers import one_line_error


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--delay-compensation", "-0.5"], "delay_compensation = -0.5"),
        (["--staleness-lr", "inverse", "--staleness-lr-floor", "0"], "staleness_lr_floor = 0"),
        (["--staleness-lr", "inverse", "--staleness-lr-floor", "1.5"], "must be > 0 and <= 1"),
        (["--staleness-lr", "sqrt"], "choose one of none, inverse"),
        (["--staleness-lr-floor", "0.5"], "--staleness-lr-floor 0.5 applies to --staleness-lr"),
    ],
)
def test_bad_staleness_values_are_refused_in_one_line(capsys, argv, fragment) -> None:
    assert fragment in one_line_error(capsys, ["train", "--schedule", "asp", *argv])


@pytest.mark.parametrize("schedule", ["bsp", "bsp:0.25,local-4"])
def test_staleness_options_for_a_schedule_without_asp_or_ssp_are_refused(
    schedule, tmp_path, capsys
) -> None:
    out = tmp_path / "run"
    argv = ["train", "--runtime", "sim", "--schedule", schedule, "--staleness-lr", "inverse",
            "--delay-compensation", "0.04", "--out", str(out)]  # fmt: skip
    err = one_line_error(capsys, argv)
    assert "--staleness-lr, --delay-compensation apply to ASP/SSP phases" in err
    assert f"schedule {schedule!r} has none" in err and not out.exists()


def test_the_rules_in_force_are_said_at_start_up_and_in_the_summary(capsys, tmp_path) -> None:
    argv = ["train", "--runtime", "sim", "--schedule", "bsp:0.5,ssp-2", "--epochs", "0.5",
            "--mnist1d-samples", "1000", "--workers", "4", "--staleness-lr", "inverse",
            "--delay-compensation", "0.04", "--out", str(tmp_path / "run"), "--no-progress",
            "--verbose"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "ASP/SSP updates: lr / staleness (floor 0.1 x lr) + delay compensation" in (
        captured.out + captured.err
    )
    assert "4 x 5,210 parameters x 4 bytes = 0.08 MiB" in captured.out + captured.err
    assert "ASP/SSP rules" in captured.out


def test_a_search_trial_without_asp_sets_the_staleness_options_aside() -> None:
    job = TrainConfig(
        schedule="online", staleness_lr="inverse", staleness_lr_floor=0.5, delay_compensation=1.0
    )
    baseline = job.with_schedule("bsp", seed=3)  # the search's BSP trial: moot there
    assert (baseline.staleness_lr, baseline.staleness_lr_floor) == ("none", 0.1)
    assert baseline.delay_compensation == 0.0 and baseline.seed == 3
    trial = job.with_schedule("bsp:0.25,asp")  # kept where they act
    assert (trial.staleness_lr, trial.delay_compensation) == ("inverse", 1.0)
