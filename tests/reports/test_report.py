"""`syncswitch report` on real runs: the table, the figure's data, the page, killed runs."""

import base64
import csv
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from syncswitch.cli.main import main
from syncswitch.reports import Report, load_run
from syncswitch.reports.plots import ACCURACY_VS_SAMPLES, ACCURACY_VS_TIME
from syncswitch.reports.tables import RUN_COLUMNS
from syncswitch.rundir import read_summary
from tests.security.helpers import one_line_error

pytestmark = pytest.mark.ray


def read_csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def axes_titled(figure, title: str):
    return next(a for a in figure.axes if a.get_title() == title)


def run_lines(axes) -> dict:
    return {line.get_label(): line for line in axes.get_lines() if line.get_label()[0] != "_"}


def switch_events(run_dir: Path) -> list[dict]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "switch"]


def test_plot_shows_each_runs_metrics_csv_and_marks_the_switch(three_runs, tmp_path):
    png = tmp_path / "report.png"
    report = Report.load([three_runs[name] for name in ("bsp", "asp", "hybrid")])
    figure = report.write_plot(png, "dashboard")

    image = imread(png)
    height, width = image.shape[:2]
    assert width >= 1000 and height >= 800
    # Not a blank canvas: a good share of pixels is drawn (lines, bars, text).
    assert (image[..., :3] < 0.9).any(axis=-1).mean() > 0.02

    by_time = run_lines(axes_titled(figure, ACCURACY_VS_TIME))
    by_samples = run_lines(axes_titled(figure, ACCURACY_VS_SAMPLES))
    assert set(by_time) == set(by_samples) == {"bsp", "asp", "bsp:0.25,asp"}
    for name, label in (("bsp", "bsp"), ("asp", "asp"), ("hybrid", "bsp:0.25,asp")):
        rows = read_csv(three_runs[name] / "metrics.csv")
        assert len(rows) == 10
        accuracy = [100 * float(r["val_accuracy"]) for r in rows]
        np.testing.assert_allclose(by_time[label].get_xdata(), [float(r["time_s"]) for r in rows])
        np.testing.assert_allclose(by_time[label].get_ydata(), accuracy)
        np.testing.assert_allclose(by_samples[label].get_xdata(), [int(r["samples"]) for r in rows])
        np.testing.assert_allclose(by_samples[label].get_ydata(), accuracy)

    # The hybrid run's switch is marked where events.jsonl says it happened.
    (switch,) = switch_events(three_runs["hybrid"])
    markers = [
        line.get_xdata()[0]
        for line in axes_titled(figure, ACCURACY_VS_TIME).get_lines()
        if line.get_label() == "_switch"
    ]
    assert markers == [pytest.approx(switch["time_s"])]


def test_staleness_histograms_count_every_applied_gradient(three_runs):
    report = Report.load([three_runs["hybrid"]])
    figure = report.figure("dashboard")
    axes = next(a for a in figure.axes if a.get_title().startswith("staleness:"))
    updates = read_csv(three_runs["hybrid"] / "updates.csv")
    bars = sum(patch.get_height() for patch in axes.patches)
    assert bars == len(updates)
    bsp = [r for r in updates if r["protocol"] == "bsp"]
    assert bsp and all(r["staleness"] == "0" for r in bsp)
    counts = load_run(three_runs["hybrid"]).staleness_counts
    assert counts["bsp"] == {0: len(bsp)}
    assert sum(counts["asp"].values()) == len(updates) - len(bsp)


class _Page(HTMLParser):
    """The tables (rows of cell texts) and image sources of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self.details = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag == "details":
            self.details += 1

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_report_command_prints_the_table_and_writes_plot_and_page(three_runs, tmp_path, capsys):
    dirs = [str(three_runs[name]) for name in ("bsp", "asp", "hybrid")]
    png, page = tmp_path / "out" / "plot.png", tmp_path / "out" / "report.html"
    assert main(["report", *dirs, "--plot", str(png), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    lines = {
        name: next(line for line in out.splitlines() if f" {name} " in line) for name in three_runs
    }
    assert "emulated" in lines["asp"] and "real" in lines["bsp"] and "real" in lines["hybrid"]
    assert "1.00x" in lines["bsp"] and "bsp>asp @" in lines["hybrid"]
    assert "timing 'emulated'" in out
    assert png.stat().st_size > 10_000

    parser = _Page()
    parser.feed(page.read_text())
    runs_table = parser.tables[0]
    assert tuple(runs_table[0]) == RUN_COLUMNS
    assert [row[0] for row in runs_table[1:]] == ["bsp", "asp", "hybrid"]
    assert [row[RUN_COLUMNS.index("timing")] for row in runs_table[1:]] == [
        "real",
        "emulated",
        "real",
    ]
    summary = read_summary(three_runs["hybrid"])
    final = runs_table[3][RUN_COLUMNS.index("final")]
    assert final == f"{100 * summary.final_value:.2f}%"
    assert summary.test is not None  # measured once at the end, apart from validation
    assert runs_table[3][RUN_COLUMNS.index("test")] == f"{100 * summary.test['accuracy']:.2f}%"
    (image,) = parser.images
    assert image.startswith("data:image/png;base64,")
    assert base64.b64decode(image.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert parser.details == 3  # one per-worker table per run


def killed_copy(run_dir: Path, to: Path) -> Path:
    """The run as a kill would leave it: summary still 'running', metrics cut short with a
    torn last line, no worker_steps.csv, a torn event."""
    shutil.copytree(run_dir, to)
    summary = json.loads((to / "summary.json").read_text())
    (to / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    lines = (to / "metrics.csv").read_text().splitlines()
    (to / "metrics.csv").write_text("\n".join(lines[:5]) + "\n" + lines[5][:12])
    (to / "worker_steps.csv").unlink()
    with (to / "events.jsonl").open("a") as handle:
        handle.write('{"event": "checkpoint", "fi')
    return to


def test_a_killed_run_is_reported_as_far_as_it_got(three_runs, tmp_path, capsys):
    killed = killed_copy(three_runs["hybrid"], tmp_path / "killed")
    rows = read_csv(killed / "metrics.csv")[:4]  # the torn fifth row does not count
    assert (
        main(["report", str(three_runs["bsp"]), str(killed), "--plot", str(tmp_path / "k.svg")])
        == 0
    )
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if " killed " in line)
    assert "incomplete" in line
    assert (
        f"{100 * float(rows[-1]['val_accuracy']):.2f}% @{float(rows[-1]['fraction']):.0%}" in line
    )
    assert "still running, or killed" in out
    assert "killed: metrics.csv: last line torn (run killed mid-write), skipped" in out
    assert (tmp_path / "k.svg").read_text().lstrip().startswith("<?xml")

    report = Report.load([killed])
    line_of = run_lines(axes_titled(report.figure("dashboard"), ACCURACY_VS_TIME))
    (label,) = line_of
    assert label == "bsp:0.25,asp [incomplete]"
    np.testing.assert_allclose(line_of[label].get_xdata(), [float(r["time_s"]) for r in rows])
    run = load_run(killed)
    assert any("metrics.csv: last line torn" in note for note in run.notes)
    assert any("events.jsonl: last line torn" in note for note in run.notes)

    # Per worker: worker_steps.csv is written at the end, so the view falls back to the
    # applied gradients in updates.csv.
    assert main(["report", "--workers", str(killed)]) == 0
    out = capsys.readouterr().out
    assert "applied gradients only" in out
    updates = read_csv(killed / "updates.csv")
    for worker in ("0", "1"):
        steps = sum(1 for r in updates if r["worker"] == worker)
        assert any(
            line.split()[:3] == ["│", worker, "│"] and f" {steps} " in line
            for line in out.splitlines()
        )


def test_a_run_killed_before_any_summary_is_still_reported(three_runs, tmp_path, capsys):
    early = killed_copy(three_runs["bsp"], tmp_path / "early")
    (early / "summary.json").unlink()
    assert main(["report", str(early)]) == 0
    out = capsys.readouterr().out
    assert "incomplete" in out and "no summary.json" in out


def test_per_worker_view_of_a_finished_run(three_runs, capsys):
    assert main(["report", "--workers", str(three_runs["asp"])]) == 0
    out = capsys.readouterr().out
    stats = read_csv(three_runs["asp"] / "worker_steps.csv")
    drops = read_csv(three_runs["asp"] / "drops.csv")
    for row in stats:
        line = next(x for x in out.splitlines() if x.split()[:2] == ["│", row["worker"]])
        assert f"{1000 * float(row['step_time_p90_s']):.2f} ms" in line
        assert f"{1000 * float(row['wait_mean_s']):.2f} ms" in line
        dropped = sum(1 for d in drops if d["worker"] == row["worker"])
        assert line.split("│")[7].strip() == str(dropped)


def test_bad_input_ends_in_one_line(three_runs, tmp_path, capsys):
    assert "does not exist" in one_line_error(capsys, ["report", str(tmp_path / "nowhere")])
    (tmp_path / "empty").mkdir()
    assert "not a run directory" in one_line_error(capsys, ["report", str(tmp_path / "empty")])

    broken = tmp_path / "broken"
    shutil.copytree(three_runs["bsp"], broken)
    lines = (broken / "metrics.csv").read_text().splitlines()
    lines[3] = lines[3].replace(lines[3].split(",")[5], "very", 1)
    (broken / "metrics.csv").write_text("\n".join(lines) + "\n")
    err = one_line_error(capsys, ["report", str(broken)])
    assert str(broken) in err and "metrics.csv line 4" in err

    (broken / "metrics.csv").write_text("\n".join(lines[:3]) + "\n")
    (broken / "config.json").write_text("{not json")
    assert "config.json is not valid JSON" in one_line_error(capsys, ["report", str(broken)])

    (broken / "config.json").write_text("[1, 2]")
    assert "must hold a JSON object" in one_line_error(capsys, ["report", str(broken)])

    shutil.copy(three_runs["bsp"] / "config.json", broken / "config.json")
    (broken / "updates.csv").write_text("version,worker\n1,0\n")
    # The dashboard reads updates.csv (staleness); the paper figure has no use for it.
    dashboard = ["--plot", str(tmp_path / "p.png"), "--plot-style", "dashboard"]
    err = one_line_error(capsys, ["report", str(broken), *dashboard])
    assert "updates.csv lacks column(s) protocol, staleness" in err

    err = one_line_error(
        capsys, ["report", str(three_runs["bsp"]), "--plot", str(tmp_path / "p.jpg")]
    )
    assert "must end in .png or .svg" in err


def test_reports_need_no_ray(three_runs, tmp_path):
    """A report can be made where Ray is not installed: nothing on its path imports it."""
    import subprocess
    import sys

    png = tmp_path / "p.png"
    code = (
        "import sys; sys.modules['ray'] = None; from syncswitch.cli.main import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "report", str(three_runs["hybrid"]), "--plot", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "hybrid" in proc.stdout and png.stat().st_size > 10_000
