"""The terminal display: a start-up status, an ETA, a last frame equal to the summary, and
the simulator's host time beside its simulated time (no Ray)."""

from __future__ import annotations

import io
import re
import time

import pytest
from rich.console import Console

import syncswitch.runtime.progress as progress
from syncswitch.control.evaluations import MetricsRow
from syncswitch.control.shard import ShardState


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    text = io.StringIO()
    console = Console(file=text, force_terminal=True, width=200, color_system=None)
    monkeypatch.setattr(progress, "project_console", lambda: console)
    return text


def test_the_start_up_status_names_each_step(screen: io.StringIO) -> None:
    with progress.startup_status(True, "loading data"):
        progress.starting("starting Ray")
        assert progress._startup is not None
    assert progress._startup is None
    with progress.startup_status(False, "loading data"):
        assert progress._startup is None  # --no-progress: nothing on the terminal


def test_each_start_up_step_ends_in_a_line_with_its_time(screen: io.StringIO) -> None:
    with progress.startup_status(True, "loading data"):
        progress.starting("starting Ray")
        progress.starting("starting 8 worker processes and the evaluator")
    # (the forced terminal's cursor codes aside)
    done = re.findall(r"syncswitch: ([^\n\x1b]+): ([0-9.]+) s$", screen.getvalue(), re.M)
    assert [step for step, _ in done] == [
        "loading data",
        "starting Ray",
        "starting 8 worker processes and the evaluator",
    ]


def test_the_start_up_time_a_run_reports_is_the_sum_of_its_listed_steps(
    screen: io.StringIO,
) -> None:
    # The summary's "+ N s start-up" once counted from the placement group on and left out
    # loading data and starting Ray, which the steps above it list (issue 47).
    with progress.startup_status(True, "loading data"):
        time.sleep(0.2)
        progress.starting("starting Ray")
        time.sleep(0.2)
        progress.starting("reserving the actors' CPUs (a placement group)")
        since = time.monotonic()
        time.sleep(0.1)
        reported = progress.startup_elapsed_s(since)
    listed = [
        float(s)
        for s in re.findall(r"syncswitch: [^\n\x1b]+: ([0-9.]+) s$", screen.getvalue(), re.M)
    ]
    assert len(listed) == 3 and reported >= 0.5
    assert reported == pytest.approx(sum(listed), abs=0.05 * len(listed) + 0.02)  # rounded to 0.1
    assert progress.startup_elapsed_s(time.monotonic()) < 0.01  # outside a start-up: from then


def test_a_pipe_is_not_cut_at_80_columns() -> None:
    from syncswitch.terminal import NOT_A_TERMINAL_WIDTH, _console

    assert _console(io.StringIO()).width == NOT_A_TERMINAL_WIDTH


def test_the_last_frame_is_the_summarys_figures(screen: io.StringIO) -> None:
    with progress.ProgressDisplay(True, 1000, simulated=True) as show:
        show.update(ShardState(samples=400, time_s=2.0), None)
        final = ShardState(samples=1000, time_s=5.1)
        show.finish(
            final,
            MetricsRow(5.0, 1000, 1.0, 40, "asp", {"accuracy": 0.9687, "loss": 0.1}, 0.1, 200.0),
        )
    frame = [line for line in screen.getvalue().splitlines() if "samples" in line][-1]
    assert "1,000/1,000 samples" in frame
    assert "val acc 96.87%" in frame
    assert "200 samples/s" in frame  # 1000 samples / 5.0 s, as summary.json computes it
    assert "sim 5.0 s" in frame and "host" in frame and "ETA" in frame
