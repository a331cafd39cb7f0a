"""The report's default figure (reports/paper.py) on simulated runs of two seeds: one panel,
each schedule's mean over its seeds with a min-max band, its switches marked; the dashboard
kept behind `--plot-style dashboard`. No Ray."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from syncswitch.cli.main import main
from syncswitch.reports import Report, load_run
from syncswitch.reports.paper import GRID_POINTS, MAX_GROUPS, STYLES, groups_of, paper_notes
from syncswitch.reports.plots import ACCURACY_VS_TIME


def lines_by_label(axes) -> dict:
    return {line.get_label(): line for line in axes.get_lines()}


def test_each_schedule_is_the_mean_of_its_seeds_with_a_min_max_band(seeded_sim_runs) -> None:
    dirs = [*seeded_sim_runs["bsp"], *seeded_sim_runs["hybrid"]]
    (axes,) = Report.load(dirs).figure().axes
    lines = lines_by_label(axes)
    assert {"bsp, 2 runs", "bsp:0.25,asp, 2 runs"} <= set(lines)
    assert axes.get_xlabel() == "simulated time (s)"
    assert axes.get_ylabel() == "validation accuracy (%)"
    bands = {c.get_label(): c for c in axes.collections if isinstance(c, PolyCollection)}
    for name, label in (("bsp", "bsp, 2 runs"), ("hybrid", "bsp:0.25,asp, 2 runs")):
        runs = [load_run(d) for d in seeded_sim_runs[name]]
        start = max(r.metrics.time_s[0] for r in runs)
        end = min(r.metrics.time_s[-1] for r in runs)
        grid = np.linspace(start, end, GRID_POINTS)
        seeds = np.stack([np.interp(grid, r.metrics.time_s, 100 * r.metrics.value) for r in runs])
        assert not np.allclose(seeds[0], seeds[1])  # the seeds differ: a band worth drawing
        np.testing.assert_allclose(lines[label].get_xdata(), grid)
        np.testing.assert_allclose(lines[label].get_ydata(), seeds.mean(axis=0))
        # The band's outline runs along the highest seed and back along the lowest.
        outline = bands[f"_band {label}"].get_paths()[0].vertices
        assert outline[:, 1].max() == pytest.approx(seeds.max())
        assert outline[:, 1].min() == pytest.approx(seeds.min())
    # Both hybrid seeds' switches are marked on their schedule's line, where they happened.
    hybrid = [load_run(d) for d in seeded_sim_runs["hybrid"]]
    marks = lines["_switch bsp:0.25,asp, 2 runs"].get_xdata()
    assert sorted(marks) == pytest.approx(sorted(s.time_s for r in hybrid for s in r.switches))
    assert "_switch bsp, 2 runs" not in lines
    legend = [t.get_text() for t in axes.figure.legends[0].get_texts()]
    assert legend[-2:] == ["switch", "min-max over runs"]


def test_one_run_per_schedule_is_its_own_line_without_a_band(seeded_sim_runs) -> None:
    first = seeded_sim_runs["hybrid"][0]
    (axes,) = Report.load([first]).figure().axes
    line = lines_by_label(axes)["bsp:0.25,asp"]
    run = load_run(first)
    np.testing.assert_allclose(line.get_xdata(), run.metrics.time_s)
    np.testing.assert_allclose(line.get_ydata(), 100 * run.metrics.value)
    assert not [c for c in axes.collections if isinstance(c, PolyCollection)]


def test_runs_of_different_jobs_are_not_averaged(seeded_sim_runs, tmp_path) -> None:
    import json
    import shutil

    other = shutil.copytree(seeded_sim_runs["bsp"][1], tmp_path / "other-job")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "workers": 8}))
    runs = [load_run(seeded_sim_runs["bsp"][0]), load_run(other)]
    assert [g.label for g in groups_of(runs)] == ["bsp (workers 4)", "bsp (workers 8)"]


def test_twelve_schedules_get_twelve_distinct_styles_and_more_are_named() -> None:
    assert len(STYLES) == MAX_GROUPS == 12
    assert len(set(STYLES)) == 12
    assert len({marker for _, _, marker in STYLES}) == 12  # tells lines apart in grey too
    assert "D" not in {marker for _, _, marker in STYLES}  # the switch's marker


def test_more_schedules_than_styles_are_named_in_the_notes(seeded_sim_runs, tmp_path) -> None:
    import json
    import shutil

    runs = []
    for index in range(MAX_GROUPS + 2):
        copy = shutil.copytree(seeded_sim_runs["bsp"][0], tmp_path / f"run-{index}")
        config = json.loads((copy / "config.json").read_text())
        (copy / "config.json").write_text(json.dumps({**config, "schedule": f"bsp:0.{index}"}))
        runs.append(load_run(copy))
    assert paper_notes(runs) == [
        f"the figure shows the first {MAX_GROUPS} of {MAX_GROUPS + 2} schedules "
        "(the tables list all runs)"
    ]
    (axes,) = Report(runs).figure().axes
    assert len([line for line in axes.get_lines() if not line.get_label().startswith("_")]) == 12


def test_the_command_draws_the_paper_figure_unless_asked_for_the_dashboard(
    seeded_sim_runs, tmp_path, capsys
) -> None:
    dirs = [str(d) for d in seeded_sim_runs["hybrid"]]
    paper, dashboard = tmp_path / "paper.png", tmp_path / "dashboard.png"
    assert main(["report", *dirs, "--plot", str(paper)]) == 0
    assert main(["report", *dirs, "--plot", str(dashboard), "--plot-style", "dashboard"]) == 0
    from PIL import Image

    # One panel (10 x 5 in) against the dashboard's rows of panels (13 in wide, taller).
    assert Image.open(paper).size == (1000, 500)
    width, height = Image.open(dashboard).size
    assert width == 1300 and height > 500
    figure = Report.load(dirs).figure("dashboard")
    assert any(a.get_title() == ACCURACY_VS_TIME for a in figure.axes)
    with pytest.raises(SystemExit):
        main(["report", *dirs, "--plot", str(paper), "--plot-style", "poster"])
    assert "invalid choice: 'poster'" in capsys.readouterr().err


def test_a_setting_only_one_job_has_tells_the_jobs_apart(seeded_sim_runs, tmp_path) -> None:
    import json
    import shutil

    other = shutil.copytree(seeded_sim_runs["bsp"][1], tmp_path / "cifar")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "dataset": "cifar10"}))
    labels = [g.label for g in groups_of([load_run(seeded_sim_runs["bsp"][0]), load_run(other)])]
    assert labels == [
        "bsp (dataset mnist1d, mnist1d_samples 1000)",
        "bsp (dataset cifar10, mnist1d_samples -)",
    ]
