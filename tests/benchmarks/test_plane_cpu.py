"""benchmarks/plane_cpu.py's arithmetic: CPU per message split by part from two marks, the
per-repeat ratios to ASP and BSP, the CPU-timing wrapper. No server, no clients."""

import statistics
import time

import pytest

from tests.benchmarks.test_harness import load

plane_cpu = load("plane_cpu")


def mark(wall, process, thread, submit, snapshot, messages, load_1m=1.0):
    return plane_cpu.Mark(wall, process, thread, submit, snapshot, messages, load_1m)


def test_the_data_plane_is_the_threads_cpu_less_the_timed_parts():
    start = mark(10.0, 1_000_000, 500_000, 100_000, 50_000, 100, load_1m=2.0)
    # 1,000 messages in 2 s; the thread spent 80 ms, 30 ms of it in submit, 10 ms in the
    # reply snapshot; the process 90 ms.
    end = mark(12.0, 91_000_000, 80_500_000, 30_100_000, 10_050_000, 1100, load_1m=3.5)
    figures = plane_cpu.per_message(start, end)
    assert figures["messages"] == 1000
    assert figures["messages_per_s"] == pytest.approx(500)
    assert figures["synchronizer_us"] == pytest.approx(30)
    assert figures["snapshot_us"] == pytest.approx(10)
    assert figures["data_plane_us"] == pytest.approx(80 - 30 - 10)
    assert figures["whole_server_us"] == pytest.approx(90)
    assert figures["load_1m"] == 3.5  # the higher of the window's two ends


def test_a_window_without_messages_is_an_error_not_a_division_by_zero():
    same = mark(1.0, 0, 0, 0, 0, 7)
    with pytest.raises(ValueError, match="no message"):
        plane_cpu.per_message(same, same)


def row(repeat, case, data_plane, synchronizer=10.0, whole=50.0, size="cnn1d"):
    return {
        "repeat": repeat,
        "size": size,
        "numel": 5210,
        "case": case,
        "messages_per_s": 1000.0,
        "data_plane_us": data_plane,
        "snapshot_us": 1.0,
        "synchronizer_us": synchronizer,
        "whole_server_us": whole,
        "load_1m": 2.0 + repeat,
    }


def test_ratios_are_medians_of_per_repeat_ratios_and_local_is_also_compared_with_bsp():
    rows = [
        # repeat 0: a slow spell slows every case alike; the ratio is 1.1 in both repeats
        row(0, "asp", 100.0),
        row(0, "bsp", 80.0, synchronizer=20.0),
        row(0, "local-16", 110.0, synchronizer=40.0),
        row(1, "asp", 40.0),
        row(1, "bsp", 44.0, synchronizer=20.0),
        row(1, "local-16", 44.0, synchronizer=20.0),
        row(2, "asp", 50.0),
        row(2, "local-16", 55.0),  # bsp missing in this repeat (a failed measurement)
    ]
    summary = {s["case"]: s for s in plane_cpu.summarise(rows, "local-16")}
    local = summary["local-16"]
    assert local["data_plane_us/asp"] == pytest.approx(1.1)
    assert local["data_plane_us"] == pytest.approx(55.0)  # median of 110, 44, 55
    assert local["data_plane_us/bsp"] == pytest.approx(statistics.median([110 / 80, 1.0]))
    assert local["synchronizer_us/bsp"] == pytest.approx(1.5)
    assert local["load_1m"] == (2.0, 4.0)
    assert local["repeats"] == 3
    assert "data_plane_us/bsp" not in summary["bsp"]  # only the local case is set beside BSP
    assert summary["asp"]["data_plane_us/asp"] == pytest.approx(1.0)


def test_the_table_says_its_timing_is_real_and_labels_the_local_case_against_bsp():
    args = plane_cpu.argparse.Namespace(
        local_steps=16, clients=4, window_s=3.0, warmup_s=1.0, repeats=2, wire_dtype="bfloat16"
    )
    rows = [row(0, "asp", 40.0), row(0, "bsp", 40.0, synchronizer=20.0), row(0, "local-16", 42.0)]
    text = plane_cpu.table(rows, args)
    assert "real timing" in text and "values as bfloat16" in text
    local_line = next(line for line in text.splitlines() if "| local-16 |" in line)
    assert "| 1.05 |" in local_line  # data plane vs ASP
    assert "1.05 / 0.50 / 1.00" in local_line  # vs BSP: data plane / synchronizer / whole


def test_the_wrapper_sums_the_calling_threads_cpu_and_counts_calls():
    def spin(n):
        end = time.thread_time_ns() + n
        while time.thread_time_ns() < end:
            pass
        return n

    timed = plane_cpu.CpuTimed(spin)
    assert timed(2_000_000) == 2_000_000
    timed(1_000_000)
    assert timed.calls == 2
    assert timed.cpu_ns >= 3_000_000
