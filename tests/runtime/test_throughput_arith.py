"""The arithmetic of benchmarks/throughput.py and benchmarks/hot_path.py (benchmarks/steady.py):
steady-window rates from time stamps, ratios and medians per repeat, the tables. No run, no
timing."""

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load(name: str):
    # The scripts import their shared helpers as `steady`, from the benchmarks folder.
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


steady = load("steady")


# -- steady window -------------------------------------------------------------------------------


def test_the_window_is_the_middle_share_of_the_first_to_last_span():
    assert steady.steady_window([10.0, 20.0]) == pytest.approx((12.0, 19.0))
    assert steady.steady_window([5.0, 0.0, 10.0], span=(0.5, 1.0)) == (5.0, 10.0)


def test_a_steady_rate_is_stamps_inside_the_window_over_its_length():
    # One step every 10 ms for 10 s: 100 steps/s whatever the window.
    times = [i * 0.01 for i in range(1001)]
    assert steady.steady_rate(times) == pytest.approx(100.0, rel=0.01)


def test_warm_up_and_tail_are_left_out():
    # 1 step/s for the first 20 s (start-up), 100 steps/s for 70 s, 1 step/s at the end.
    times = [float(t) for t in range(20)]
    times += [20 + i * 0.01 for i in range(7000)]
    times += [90.0 + t for t in range(11)]  # last stamp at 100 s: window 20 s .. 90 s
    assert steady.steady_rate(times) == pytest.approx(100.0)


def test_stamps_from_several_processes_in_any_order_add_up():
    one = [i * 0.01 for i in range(1001)]
    merged = sorted(one + [t + 0.005 for t in one], reverse=True)  # two ranks, interleaved
    assert steady.steady_rate(merged) == pytest.approx(200.0, rel=0.01)


def test_a_bsp_update_is_its_gradients_sharing_one_stamp():
    # 8 gradients per update, one update every 40 ms: 200 gradients/s, not biased by grouping.
    times = [u * 0.04 for u in range(501) for _ in range(8)]
    assert steady.steady_rate(times) == pytest.approx(200.0, rel=0.02)


def test_no_window_without_two_distinct_stamps():
    with pytest.raises(ValueError, match="at least 2"):
        steady.steady_rate([1.0])
    with pytest.raises(ValueError, match="same time stamp"):
        steady.steady_rate([1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="span"):
        steady.steady_window([0.0, 1.0], span=(0.9, 0.2))


def test_count_in_is_half_open():
    assert steady.count_in([1.0, 2.0, 3.0], (1.0, 3.0)) == 2


def test_ratio_and_medians_skip_missing_figures():
    assert steady.ratio(3.0, 2.0) == 1.5
    assert steady.ratio(None, 2.0) is None
    assert steady.ratio(3.0, 0.0) is None
    rows = [{"a": 1.0, "b": None}, {"a": 3.0, "b": 4.0}, {"a": 2.0, "b": None}]
    assert steady.medians(rows) == {"a": 2.0, "b": 4.0}
    assert steady.medians([{"a": None}]) == {"a": None}


def test_update_rows_are_read_from_a_run_csv(tmp_path):
    path = tmp_path / "updates.csv"
    path.write_text("version,time_s,samples\n1,0.5,32\n2,0.75,64\n")
    rows = steady.read_csv_rows(path)
    assert [float(r["time_s"]) for r in rows] == [0.5, 0.75]


# -- throughput.py -------------------------------------------------------------------------------


def test_ratios_are_taken_within_one_repeat():
    bench = load("throughput")
    ratios = bench.repeat_ratios({"plain": 100.0, "ddp": 50.0, "asp": 40.0, "bsp": 25.0})
    assert ratios == {"asp/plain": 0.4, "bsp/plain": 0.25, "bsp/ddp": 0.5, "asp/ddp": 0.8}
    failed = bench.repeat_ratios({"plain": 100.0, "ddp": None, "asp": 40.0, "bsp": 25.0})
    assert failed["bsp/ddp"] is None and failed["asp/plain"] == 0.4


def test_each_repeat_starts_one_system_later():
    bench = load("throughput")
    systems = ("plain", "ddp", "asp", "bsp")
    assert bench.rotated(systems, 0) == ["plain", "ddp", "asp", "bsp"]
    assert bench.rotated(systems, 1) == ["ddp", "asp", "bsp", "plain"]
    assert bench.rotated(systems, 5) == bench.rotated(systems, 1)


def test_the_table_gives_medians_of_rates_and_of_per_repeat_ratios():
    bench = load("throughput")
    repeats = []
    for plain, asp in ((100.0, 50.0), (200.0, 60.0), (150.0, 90.0)):
        rates = {"plain": plain, "ddp": 80.0, "asp": asp, "bsp": 40.0}
        repeats.append({"samples_per_s": rates, "ratios": bench.repeat_ratios(rates)})
    text = bench.table(repeats, workers=8, batch_size=32, epochs=12, plain_epochs=36)
    assert "no emulation, real compute, 8 processes" in text.lower()
    assert "| plain PyTorch, 1 process | 150 | 100, 200, 150 |" in text
    assert "| syncswitch ASP, 8 workers | 60 | 50, 60, 90 |" in text
    # The median of the per-repeat ratios (0.5, 0.3, 0.6), not 60 / 150.
    assert "| asp/plain | 0.50 | 0.50, 0.30, 0.60 |" in text


# -- hot_path.py ---------------------------------------------------------------------------------


def test_the_ideal_is_every_worker_once_per_emulated_step():
    bench = load("hot_path")
    assert bench.ideal_updates_per_s(8, 20.0) == pytest.approx(400.0)


def test_a_run_is_measured_over_its_steady_window():
    bench = load("hot_path")
    updates = [i * 0.005 for i in range(2001)]  # 200/s for 10 s: window 2 s .. 9 s
    steps = [0.020] * len(updates)
    row = bench.measure_updates(
        updates,
        steps,
        eval_times_s=[1.0, 5.0, 9.5],
        checkpoint_times_s=[2.0, 8.99],
        ideal_per_s=400,
    )
    assert row["updates_per_s"] == pytest.approx(200.0, rel=0.01)
    assert row["vs_ideal"] == pytest.approx(0.5, rel=0.01)
    assert row["mean_step_time_ms"] == pytest.approx(20.0)
    assert row["evaluations_in_window"] == 1
    assert row["checkpoints_in_window"] == 2


def test_the_hot_path_table_reports_the_busy_over_quiet_ratio_per_repeat():
    bench = load("hot_path")
    repeats = []
    for quiet, busy in ((300.0, 270.0), (250.0, 250.0)):
        runs = {
            kind: {
                "updates_per_s": rate,
                "vs_ideal": rate / 400,
                "evaluations_in_window": n,
                "checkpoints_in_window": n,
            }
            for kind, rate, n in (("quiet", quiet, 0), ("busy", busy, 70))
        }
        repeats.append(
            {
                "runs": runs,
                "updates_per_s": {"quiet": quiet, "busy": busy},
                "busy/quiet": busy / quiet,
            }
        )
    args = argparse.Namespace(workers=8, step_time_ms=20.0, epochs=12.0, busy_loggers=[])
    text = bench.table(repeats, args)
    assert "EMULATED 20 ms" in text
    assert "| 275 | 68.8% | 300, 250 | 0/0, 0/0 |" in text
    assert "median **0.950** (0.900, 1.000)" in text
