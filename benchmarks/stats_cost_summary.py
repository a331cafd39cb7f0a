"""Medians over repeated `gradient_stats_cost.py` runs, at the plan's settings (issue 21).

Reads the tables the runs printed (benchmarks/results/stats-cost/<label>-w<n>-r<k>.md, each
starting with a `load` line), takes for each worker count the setting the plan uses there
(control/plan.py `stats_every` on the scale study's job: one round in 4, 2, 1 at 8, 16, 32
workers) and prints, per label ("before": the third round's code, "after": what runs now),
the median over the repeats of the cost inside the synchronizer's round and alone, in
microseconds and in % of the server's round with its reads (the goal's 2%).

    python benchmarks/stats_cost_summary.py benchmarks/results/stats-cost
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import harness

PLAN_EVERY = {8: 4, 16: 2, 32: 1}
CELL = re.compile(r"^\s*(-?[\d.]+) \((-?[\d.]+)% / (-?[\d.]+)%\)\s*$")
NAME = re.compile(r"^(?P<label>[a-z]+)-w(?P<workers>\d+)-r(?P<repeat>\d+)\.md$")


def read_table(path: Path) -> tuple[float | None, dict[str, dict[str, str]]]:
    """The 1-minute load of the `load` line and the table's rows by model, as {column: cell}."""
    lines = path.read_text().splitlines()
    load = float(lines[0].split()[1]) if lines and lines[0].startswith("load ") else None
    table = [line for line in lines if line.startswith("|")]
    if len(table) < 3:  # a run still going, or one that failed: nothing to read
        return load, {}
    columns = [c.strip() for c in table[0].strip("|").split("|")]
    rows = {}
    for line in table[2:]:
        values = [c.strip() for c in line.strip("|").split("|")]
        rows[values[0]] = dict(zip(columns, values, strict=True))
    return load, rows


def plan_cells(row: dict[str, str], every: int) -> tuple[str, str]:
    """The plan's setting's in-the-round and alone cells, in either version's columns."""
    for setting in (f"every {every}, admission", f"every {every}"):
        if f"{setting}: in the round" in row:
            return row[f"{setting}: in the round"], row[f"{setting}: alone"]
    raise ValueError(f"no 'every {every}' column in {sorted(row)}")


def parse(cell: str) -> tuple[float, float]:
    """(microseconds, % of the server's round with the reads) from '13.1 (7.9% / 2.2%)'."""
    match = CELL.match(cell)
    if match is None:
        raise ValueError(f"not a cost cell: {cell!r}")
    return float(match.group(1)), float(match.group(3))


def main() -> None:
    parser = harness.parser(__doc__, epilog=True)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    found: dict[tuple[str, int, str], list[tuple[float, float, float, float]]] = {}
    loads: list[float] = []
    for path in sorted(args.folder.glob("*.md")):
        name = NAME.match(path.name)
        if name is None:
            continue
        workers = int(name["workers"])
        load, rows = read_table(path)
        if load is not None:
            loads.append(load)
        for model, row in rows.items():
            inside, alone = plan_cells(row, PLAN_EVERY[workers])
            found.setdefault((model, workers, name["label"]), []).append(
                (*parse(inside), *parse(alone))
            )
    title = (
        "Online timing's statistics per BSP round at the plan's settings, real host CPU time "
        "(thread time); medians over repeats; 1-minute machine load at the runs' starts: "
        + (f"{min(loads):.1f} to {max(loads):.1f}" if loads else "not recorded")
    )
    print(harness.check_timing(title, harness.Timing.REAL))
    print()
    columns = [
        "model",
        "workers",
        "every",
        "code",
        "repeats",
        "in the round: us",
        "in the round: % of server round",
        "alone: us",
        "alone: % of server round",
    ]
    rows = []
    for (model, workers, label), runs in sorted(
        found.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "before")
    ):
        med = [statistics.median(r[i] for r in runs) for i in range(4)]
        rows.append(
            [
                model,
                workers,
                PLAN_EVERY[workers],
                label,
                len(runs),
                f"{med[0]:.1f}",
                f"{med[1]:.1f}%",
                f"{med[2]:.1f}",
                f"{med[3]:.1f}%",
            ]
        )
    print("\n".join(harness.markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
