"""benchmarks/stats_cost_summary.py: the plan's setting read from either version's table, and
medians over repeats."""

import pytest

from tests.benchmarks.test_harness import load

summary = load("stats_cost_summary")

BASE = ["model", "parameters", "BSP round (bsp)", "+ reads"]


def table(load: str, columns: list[str], cells: list[str]) -> str:
    """A run's output as gradient_stats_cost.py prints it (one cnn1d row)."""

    def line(values):
        return "| " + " | ".join(values) + " |"

    rows = [line(BASE + columns), line(["---"] * (len(BASE) + len(columns)))]
    rows.append(line(["cnn1d", "5,210", "160", "600", *cells]))
    return f"load {load}\ntitle\n\n" + "\n".join(rows) + "\n"


def before(inside: float, share: float) -> str:
    # The third round's columns: "every k: ..."
    columns = ["every 1: in the round", "every 4: in the round", "every 1: alone", "every 4: alone"]
    cells = ["40.0 (25.0% / 6.7%)", f"{inside} (7.5% / {share}%)", "19.0 (11.9% / 3.2%)"]
    return table("3.5 2.0 1.0", columns, [*cells, "6.0 (3.8% / 1.0%)"])


def after(inside: float, share: float) -> str:
    # The fourth round's: "every k, admission: ..." beside "every k, rows: ..."
    columns = [
        f"every 4, {how}: {where}"
        for where in ("in the round", "alone")
        for how in ("admission", "rows")
    ]
    cells = [f"{inside} (5.0% / {share}%)", "99.0 (60.0% / 16.5%)", "3.0 (1.9% / 0.5%)"]
    return table("0.5 0.5 0.5", columns, [*cells, "9.0 (5.6% / 1.5%)"])


def test_the_plans_setting_and_the_medians_of_each_version(tmp_path, capsys, monkeypatch):
    for k, (inside, share) in enumerate([(12.0, 2.0), (14.0, 2.3), (10.0, 1.7)], start=1):
        (tmp_path / f"before-w8-r{k}.md").write_text(before(inside, share))
    for k, (inside, share) in enumerate([(8.0, 1.3), (9.0, 1.5)], start=1):
        (tmp_path / f"after-w8-r{k}.md").write_text(after(inside, share))
    (tmp_path / "after-w8-r3.md").write_text("load 1.0 1.0 1.0\n")  # still running: skipped
    (tmp_path / "notes.md").write_text("| not | a run |\n")  # not a run's name: skipped
    monkeypatch.setattr("sys.argv", ["stats_cost_summary.py", str(tmp_path)])
    summary.main()
    lines = capsys.readouterr().out.splitlines()
    assert "load at the runs' starts: 0.5 to 3.5" in lines[0]
    rows = [line for line in lines if line.startswith("| cnn1d")]
    # before first; the "rows" columns of the new table are not the plan's setting
    assert rows == [
        "| cnn1d | 8 | 4 | before | 3 | 12.0 | 2.0% | 6.0 | 1.0% |",
        "| cnn1d | 8 | 4 | after | 2 | 8.5 | 1.4% | 3.0 | 0.5% |",
    ]


def test_a_cell_that_is_no_cost_is_an_error():
    assert summary.parse("8.5 (5.2% / 1.4%)") == (8.5, 1.4)
    with pytest.raises(ValueError, match="not a cost cell"):
        summary.parse("8.5 us")
