"""The report's figure for an online run: the signal and threshold against progress, the
switch marked, beside the accuracy curve."""

from __future__ import annotations

from syncswitch.reports.plots import plot_runs
from syncswitch.rundir import load_run
from tests.control.scripted import ScriptedRun


def test_an_online_run_gets_its_signal_panel_beside_its_accuracy(tmp_path) -> None:
    ScriptedRun(tmp_path / "online", schedule="online", epochs=20.0, switch_ceiling=0.5).run()
    ScriptedRun(tmp_path / "fixed", schedule="bsp:0.5,asp").run()
    online, fixed = load_run(tmp_path / "online"), load_run(tmp_path / "fixed")
    assert online.timing_signals is not None and len(online.timing_signals) > 10
    assert fixed.timing_signals is None
    figure = plot_runs([("online", online), ("fixed", fixed)])
    titles = [axes.get_title() for axes in figure.axes]
    assert "online: online timing signal (floor and ceiling dotted)" in titles
    assert "online: validation accuracy (%), the switch marked" in titles
    assert not any(t.startswith("fixed: online timing") for t in titles)
    [signal_axes] = [a for a in figure.axes if "timing signal" in a.get_title()]
    labels = signal_axes.get_legend_handles_labels()[1]
    assert "threshold" in labels and any(label.startswith("switch at") for label in labels)
