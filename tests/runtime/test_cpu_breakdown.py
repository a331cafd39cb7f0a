"""The CPU-breakdown benchmark's arithmetic: role split and py-spy summary (no Ray run)."""

import importlib.util
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "cpu_breakdown", REPO / "benchmarks" / "cpu_breakdown.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_workers_share_is_reported_without_the_forward_backward_pass():
    bench = load_benchmark()
    row = {"cpu_ms_per_gradient": {"server": 1.0, "workers": 3.0, "ray": 0.5}}
    split = bench.split_roles(row, fb_ms=0.75)
    assert split["workers_excl_fb"] == 2.25
    assert split["driver_evaluator"] == 0.0
    assert split["total"] == 1.0 + 3.0 + 0.5
    assert split["framework"] == split["total"] - 0.75


def test_py_spy_raw_output_is_summarised_by_self_and_total(tmp_path):
    bench = load_benchmark()
    raw = tmp_path / "raw.txt"
    raw.write_text(
        "thread (1): MainThread;run (a/b/server.py:10);step (c/opt.py:5) 3\n"
        "thread (1): MainThread;run (a/b/server.py:12);pickle (d/ser.py:7) 1\n"
    )
    text = bench.profile_summary(raw, top=5)
    assert "4 samples" in text
    assert "75.0%  step (c/opt.py)" in text  # self
    assert "100.0%  run (b/server.py)" in text  # total: both lines of run() in one function
    assert "100.0%  thread (1): MainThread" in text


def test_processes_are_found_below_this_one():
    bench = load_benchmark()
    assert os.getpid() in bench.descendants(os.getpid())
    assert bench.process_cpu_s(os.getpid()) > 0
