"""Local-H phases at the command line: bad values refused in one line, a simulated run."""

import pytest

from syncswitch.cli.main import main
from syncswitch.rundir import read_summary
from tests.security.helpers import one_line_error


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--schedule", "bsp:0.25,local-0"], "local-H needs H"),
        (["--schedule", "bsp:0.25,local-abc"], "not 'abc'"),
        (["--outer-lr", "-1"], "outer_lr = -1"),
        (["--outer-lr", "0"], "outer_lr = 0"),
        (["--outer-momentum", "1"], "outer_momentum = 1"),
        (["--outer-optimizer", "adam"], "choose one of average, nesterov"),
        (["--local-steps-rule", "random"], "choose one of fixed, qsr"),
        (["--cluster", "wan-2g", "--runtime", "sim"], "presets are default, paper-k80, wan-1g"),
    ],
)
def test_bad_local_values_are_refused_in_one_line(capsys, argv, fragment) -> None:
    assert fragment in one_line_error(capsys, ["train", *argv])


def test_bsp_then_local_runs_on_the_simulator_and_reports_the_phase(capsys, tmp_path) -> None:
    out = tmp_path / "run"
    argv = ["train", "--runtime", "sim", "--schedule", "bsp:0.25,local-16", "--epochs", "1",
            "--mnist1d-samples", "2000", "--workers", "4", "--cluster", "wan-1g",
            "--outer-optimizer", "nesterov", "--outer-lr", "0.7", "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "local-16" in printed and "bsp>local-16" in printed
    summary = read_summary(out)
    assert [s.to_protocol for s in summary.switches] == ["local-16"]
    assert summary.traffic is not None and summary.traffic["bytes_by_protocol"]["local"] > 0
    assert "local-16" in (out / "updates.csv").read_text()
    assert main(["report", str(out)]) == 0
    assert "local-16" in capsys.readouterr().out


@pytest.mark.parametrize("schedule", ["bsp", "bsp:0.25,asp", "online"])
def test_local_options_for_a_schedule_without_a_local_phase_are_refused(
    schedule, tmp_path, capsys
) -> None:
    out = tmp_path / "run"
    argv = ["train", "--runtime", "sim", "--schedule", schedule, "--outer-optimizer", "nesterov",
            "--local-lr-factor", "0.5", "--out", str(out)]  # fmt: skip
    err = one_line_error(capsys, argv)
    assert "--outer-optimizer, --local-lr-factor apply to a local phase" in err
    assert f"schedule {schedule!r} has none" in err and not out.exists()
