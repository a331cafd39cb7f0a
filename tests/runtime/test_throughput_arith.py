"""The arithmetic of benchmarks/throughput.py (and its helpers, benchmarks/steady.py):
steady-window rates from time stamps, ratios and medians per repeat, the tables. No run, no
timing."""

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
