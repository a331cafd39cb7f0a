"""`report --plot` of real and simulated runs together: each time axis carries one kind of
seconds, no label is clipped, coinciding curves stay visible, and the terminal table fits 120
columns (issue 47). Real runs on Ray (the module's three) and one on the simulator."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.reports import Report
from syncswitch.reports.tables import TERMINAL_TABLE_WIDTH
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

pytestmark = pytest.mark.ray

TIME_LABELS = {"wall time (s)", "simulated time (s)"}


@pytest.fixture(scope="module")
def mixed(three_runs, tmp_path_factory) -> list[Path]:
    """The real BSP and hybrid runs, a simulated run of the same job, and a copy of the real
    BSP run under another schedule that never left BSP (a curve that coincides with BSP's,
    as an online run that stayed in BSP would)."""
    root = tmp_path_factory.mktemp("mixed")
    config = TrainConfig(
        runtime="sim", workers=2, epochs=1.0, mnist1d_samples=1000, eval_every=0.1,
        progress=False, schedule="bsp:0.25,asp", out=str(root / "sim"),
    )  # fmt: skip
    simulated = train(config, dataset=load_dataset("mnist1d", mnist1d_samples=1000)).run_dir
    twin = root / "bsp-again"
    shutil.copytree(three_runs["bsp"], twin)
    for name in ("summary.json", "config.json"):
        record = json.loads((twin / name).read_text())
        record["schedule"] = "bsp:0.99,asp"
        (twin / name).write_text(json.dumps(record))
    return [three_runs["bsp"], three_runs["hybrid"], simulated, twin]


def _drawn_texts(figure: Figure) -> list[Text]:
    """The texts the figure draws: its own, every legend's, and each axes' titles, axis
    labels and the tick labels of ticks inside its view (matplotlib keeps others undrawn)."""
    texts = list(figure.texts) + [t for legend in figure.legends for t in legend.get_texts()]
    for axes in figure.axes:
        texts += [axes.title, axes._left_title, axes._right_title]
        texts += [axes.xaxis.label, axes.yaxis.label]
        if axes.get_legend() is not None:
            texts += axes.get_legend().get_texts()
        for axis in (axes.xaxis, axes.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low):
                    texts.append(tick.label1)
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def _clipped(figure: Figure) -> list[str]:
    """Every drawn text whose extent leaves the figure (a clipped label)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    box = figure.bbox
    out = []
    for text in _drawn_texts(figure):
        extent = text.get_window_extent(renderer)
        if (
            extent.x0 < box.x0 - 0.5
            or extent.y0 < box.y0 - 0.5
            or extent.x1 > box.x1 + 0.5
            or extent.y1 > box.y1 + 0.5
        ):
            out.append(text.get_text())
    assert figure.get_tightbbox(renderer).bounds[2] <= figure.bbox_inches.width + 0.01
    return out


def _time_axes(figure: Figure) -> list:
    return [a for a in figure.axes if "time" in a.get_xlabel()]


@pytest.mark.parametrize("style", ["paper", "dashboard"])
def test_real_and_simulated_seconds_never_share_an_axis_and_no_label_is_clipped(
    mixed, tmp_path, style
) -> None:
    png = tmp_path / f"{style}.png"
    assert main(["report", *map(str, mixed), "--plot", str(png), "--plot-style", style]) == 0
    figure = Report.load(mixed).figure(style)
    axes = _time_axes(figure)
    assert {a.get_xlabel() for a in axes} == TIME_LABELS  # a panel for each, one kind each
    assert _clipped(figure) == []


def test_a_curve_equal_to_another_is_drawn_apart_and_says_so(mixed) -> None:
    for style in ("paper", "dashboard"):
        figure = Report.load(mixed).figure(style)
        texts = [t.get_text() for t in figure.findobj(Text)]
        assert any("(same curve as" in t for t in texts), style
        lines = [
            line for a in figure.axes for line in a.get_lines() if "same curve" in line.get_label()
        ]
        assert lines and all(line.get_marker() not in (None, "None", "") for line in lines)


def test_the_terminal_table_fits_120_columns(mixed, capsys) -> None:
    assert main(["report", *map(str, mixed)]) == 0
    out = capsys.readouterr().out
    table = out.split("\n  ")[0]  # the table, before its notes
    widths = [len(line) for line in table.splitlines()]
    assert max(widths) <= TERMINAL_TABLE_WIDTH, max(widths)
