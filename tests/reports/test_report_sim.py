"""`report` on simulated runs (no Ray): skipped directories, the job columns, the not-the-same-
job warning, simulated time axes, and no empty panel."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.reports import Report
from syncswitch.reports.plots import ACCURACY_VS_TIME
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

JOB = dict(runtime="sim", workers=4, epochs=1.0, mnist1d_samples=1000, progress=False,
           eval_every=0.25)  # fmt: skip


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sim-runs")
    dataset = load_dataset("mnist1d", mnist1d_samples=1000)
    runs = {}
    for name, extra in {"bsp": {"schedule": "bsp"}, "longer": {"epochs": 2.0}}.items():
        config = TrainConfig(**{**JOB, **extra, "out": str(root / name)})
        runs[name] = train(config, dataset=dataset).run_dir
    (root / "refused").mkdir()  # what a run refused before it started leaves behind
    return runs


def test_directories_without_a_run_are_skipped_and_named(sim_runs, capsys) -> None:
    refused = sim_runs["bsp"].parent / "refused"
    assert main(["report", str(sim_runs["bsp"]), str(refused)]) == 0
    captured = capsys.readouterr()
    assert f"skipped {str(refused)!r}: is not a run directory" in captured.err
    assert "bsp" in captured.out
    assert main(["report", str(refused)]) == 2  # nothing left to report: one line
    assert "no run to report" in capsys.readouterr().err


def test_the_table_names_the_job_and_warns_when_jobs_differ(sim_runs) -> None:
    table = Report.load([sim_runs["bsp"], sim_runs["longer"]]).runs_table()
    row = dict(zip(table.columns, table.rows[1], strict=True))
    assert row["runtime"] == "sim" and row["timing"] == "simulated"
    assert row["dataset"] == "mnist1d (cnn1d)" and row["workers"] == "4"
    assert row["workload"].startswith("2 ep / ")
    warnings = [n for n in table.notes if n.startswith("warning:")]
    assert len(warnings) == 1 and "epochs 1 vs 2" in warnings[0]
    same = Report.load([sim_runs["bsp"]]).runs_table()
    assert not any(n.startswith("warning:") for n in same.notes)


def test_simulated_runs_plot_against_simulated_time_with_no_empty_panel(sim_runs) -> None:
    report = Report.load([sim_runs["bsp"], sim_runs["longer"]])
    (paper,) = report.figure().axes
    assert paper.get_xlabel() == "simulated time (s)"
    figure = report.figure("dashboard")
    by_time = next(a for a in figure.axes if a.get_title() == ACCURACY_VS_TIME)
    assert by_time.get_xlabel() == "simulated time (s)"
    for axes in figure.axes:
        assert axes.has_data(), f"empty panel {axes.get_title()!r}"


def test_the_time_axis_says_which_runs_are_simulated_when_mixed() -> None:
    from types import SimpleNamespace

    from syncswitch.reports.plots import time_label

    def run(timing: str) -> SimpleNamespace:
        return SimpleNamespace(timing=timing)

    assert time_label([("a", run("real")), ("b", run("emulated"))]) == "wall time (s)"
    assert time_label([("a", run("simulated"))]) == "simulated time (s)"
    mixed = time_label([("ray run", run("real")), ("sim run", run("simulated"))])
    assert mixed == "time (s): simulated for sim run; wall time for the others"
