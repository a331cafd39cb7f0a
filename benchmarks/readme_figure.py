"""The README's figure, drawn from committed measurements (no training is run).

Reads benchmarks/results/reference-dataplane/runs.jsonl (the reference job: MNIST-1D, 8
workers, 80 epochs, EMULATED 20 ms steps; `python benchmarks/reference.py`) and plots each
schedule's final test accuracy against its wall time, so that BSP-then-ASP's promise (BSP's
accuracy in less time) can be read at a glance.

    python benchmarks/readme_figure.py            # writes docs/img/reference-accuracy-vs-time.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import RunLog, row_from
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from reference import RunRow

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks/results/reference-dataplane/runs.jsonl"
OUT = ROOT / "docs/img/reference-accuracy-vs-time.png"
HIGHLIGHT = "bsp:0.25,asp (scale)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    # The reference script's rows, read as it writes them (its RunRow, through the harness).
    rows = [row_from(RunRow, record) for record in RunLog(args.runs).read()]
    finished = [r for r in rows if r.final_accuracy is not None]
    bsp = next(r for r in finished if r.case == "bsp")
    figure = Figure(figsize=(9, 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    accuracy_axes, time_axes = figure.subplots(1, 2, sharey=True)
    names = [r.case for r in finished]
    colors = [
        "#c44e52" if n == HIGHLIGHT else "#4c72b0" if n == "bsp" else "#a0a0a0" for n in names
    ]
    accuracies = [100 * r.final_accuracy for r in finished]
    times = [r.wall_time_s / bsp.wall_time_s for r in finished]
    accuracy_axes.barh(names, accuracies, color=colors)
    accuracy_axes.set_xlim(0, 112)
    accuracy_axes.invert_yaxis()
    accuracy_axes.set_xlabel("final test accuracy (%)")
    time_axes.barh(names, times, color=colors)
    time_axes.set_xlabel("wall time vs BSP (EMULATED 20 ms steps)")
    for axes, values, form in (
        (accuracy_axes, accuracies, "{:.1f}%"),
        (time_axes, times, "{:.2f}x"),
    ):
        for index, value in enumerate(values):
            axes.text(value, index, " " + form.format(value), va="center", fontsize=8)
    time_axes.set_xlim(0, max(times) * 1.25)
    for axes in (accuracy_axes, time_axes):
        axes.grid(axis="x", alpha=0.3)
    figure.suptitle(
        "MNIST-1D, 8 workers, 80 epochs: BSP for 25% of the samples, then ASP, "
        "reaches BSP's accuracy in less time",
        fontsize=10,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
