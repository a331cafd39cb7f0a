"""A quiet terminal: the project's own lines on it, Ray's and PyTorch's output in a file."""

import json
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from syncswitch.terminal import library_output_to, project_console

# What a line from a library looks like: Python logging or Ray's C++ log (timestamped, with a
# level), output Ray forwards from an actor, a Python warning, a traceback.
LIBRARY_LINE = re.compile(
    r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|\(\w+ pid=\d+|\w+Warning:|Traceback|"
    r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b"
)

TRAIN = [sys.executable, "-m", "syncswitch.cli.main", "train", "--workers", "2", "--epochs", "0.5"]
TRAIN += ["--mnist1d-samples", "400"]
# A user's shell: the test session's own Ray exports RAY_AUTH_MODE, and a child that inherits
# it starts Ray without the notice it prints by default (the line this test expects in the log).
USER_ENV = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}


def test_everything_but_the_project_console_goes_to_the_log(tmp_path, capfd):
    log = tmp_path / "run" / "ray.log"
    with library_output_to(log):
        print("from python print")
        library = logging.getLogger("some.library")  # configured as a library does on import
        library.addHandler(logging.StreamHandler())
        library.propagate = False
        library.warning("from a python logger")
        # Printed as Python prints warnings (pytest records warn() calls instead of printing).
        sys.stderr.write(warnings.formatwarning("from a python warning", UserWarning, __file__, 1))
        os.write(2, b"from C, straight to descriptor 2\n")
        subprocess.run(["sh", "-c", "echo from a child process"], check=True)
        project_console().print("the project's own line")
    print("after the block")
    captured = capfd.readouterr()
    terminal = captured.out + captured.err
    assert "the project's own line" in terminal and "after the block" in terminal
    assert "from" not in terminal.replace("after the block", "")
    text = log.read_text()
    for line in (
        "from python print",
        "from a python logger",
        "from a python warning",
        "from C, straight to descriptor 2",
        "from a child process",
    ):
        assert line in text


@pytest.mark.ray
def test_a_default_train_run_shows_no_line_from_ray_or_pytorch(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [*TRAIN, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        env=USER_ENV,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    terminal = proc.stdout.splitlines()
    library = [line for line in terminal if LIBRARY_LINE.search(line)]
    assert library == [], library
    assert any(line.startswith(f"results written to {out}") for line in terminal)
    assert any(f"syncswitch report {out} --plot" in line for line in terminal)
    assert any("final" in line and "best" in line and "%" in line for line in terminal)
    # Whatever Ray wrote is in the file (with token authentication forced on, a locked-down
    # local instance may print nothing at all), and none of it is an error.
    ray_log = (out / "ray.log").read_text().splitlines()
    assert not [line for line in ray_log if re.search(r"\bERROR\b|^\[[^\]]* E \d+", line)]


@pytest.mark.ray
@pytest.mark.slow
def test_verbose_shows_the_libraries_lines(tmp_path: Path) -> None:
    # Ray at our WARNING level may print nothing at all, so a library that surely speaks is
    # brought in: MLflow logs INFO lines when it creates its SQLite store on first use.
    pytest.importorskip("mlflow")
    out = tmp_path / "run"
    proc = subprocess.run(
        [*TRAIN, "--out", str(out), "--verbose", "--json", "--logger", "mlflow"],
        capture_output=True,
        text=True,
        timeout=300,
        env=USER_ENV,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    library = [line for line in proc.stderr.splitlines() if LIBRARY_LINE.search(line)]
    assert any("mlflow" in line for line in library), proc.stderr[-3000:]
    assert not (out / "ray.log").exists()
    assert json.loads(proc.stdout)["run_dir"] == str(out)


def test_an_online_job_too_short_to_leave_bsp_says_so() -> None:
    from syncswitch.run_summary import online_timing_line
    from syncswitch.rundir.summary import OnlineTimingSummary

    ended = OnlineTimingSummary(
        rule="staleness", threshold=0.15, floor=0.0625, ceiling=0.875,
        decided_at=1.0, reason="ceiling", checks=1,
    )  # fmt: skip
    line = online_timing_line(ended)
    assert line.startswith("no switch: training ended as the rule decided (ceiling, after 1 check)")
    undecided = OnlineTimingSummary(rule="plateau", threshold=0.05, floor=0.0625, ceiling=0.875)
    assert online_timing_line(undecided).startswith("no switch of its own: not decided")
