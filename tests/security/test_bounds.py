"""Every size a user gives is bounded before anything is allocated or started, with one line
naming the value and the limit (issue 16, "No upper bounds")."""

import resource
import time
import tracemalloc
from pathlib import Path

import pytest

from syncswitch.cli.search import options_from_args
from syncswitch.config import load_config_file, make_config
from syncswitch.errors import ConfigError, WorkloadError
from syncswitch.workloads.cifar import read_cifar
from tests.security.helpers import assert_one_line_exit_2, one_line_error, run_cli


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"workers": 100_000}, "workers = 100000 is not allowed; it must be in 1..1024"),
        ({"servers": 1000}, "servers = 1000 is not allowed; it must be in 1..64"),
        ({"batch_size": 10**9}, "batch_size = 1000000000"),
        ({"mnist1d_samples": 10**9}, "mnist1d_samples = 1000000000"),
        ({"epochs": 1e9}, "epochs = 1000000000.0 is not allowed; it must be > 0 and <= 100000"),
        ({"epochs": 50_000.0, "mnist1d_samples": 1_000_000}, "at most 1e+10 allowed"),
        ({"epochs": "1e400"}, "epochs = inf is not allowed; it must be a finite number"),
        ({"step_time_ms": 1e12}, "step_time_ms = 1000000000000.0"),
        ({"worker_timeout_s": "inf"}, "worker_timeout_s = inf"),
        ({"checkpoint_every_s": 1e15}, "checkpoint_every_s"),
        ({"eval_every": 1e-300}, "eval_every = 1e-300 is not allowed; it must be in [0.0001, 1]"),
        ({"checkpoint_every": 1e-9}, "checkpoint_every = 1e-09"),
        ({"straggler_window": 10**9}, "straggler_window = 1000000000"),
        ({"max_worker_restarts": 10**12}, "max_worker_restarts"),
        ({"seed": 2**40}, "seed = 1099511627776 is not allowed; it must be in 0..2147483647"),
        ({"seed": -1}, "seed = -1"),
        ({"jitter_sigma": 1e6}, "jitter_sigma"),
        # float32 would round it to 0, and the run stall on a division by nothing.
        (
            {"optimizer": "adam", "eps": 1e-300},
            "eps = 1e-300 is not allowed; it must be in [1e-30, 1]",
        ),
        (
            {"delay_compensation": 1e6},
            "delay_compensation = 1000000.0 is not allowed; it must be in [0, 10]",
        ),
        (
            {"speed_factors": [1e300, 1]},
            "speed_factors = 1e+300",
        ),
        ({"workers": 10**5000}, "workers = an integer of 16610 bits"),
        ({"schedule": "bsp:0.5," * 5000 + "asp"}, "schedule has 40003 characters"),
        ({"lr_milestones": [0.5] * 20_000}, "lr_milestones has 20000 entries"),
        (
            {"stragglers": [{"random": {"count": 10**9, "duration": 1e-12, "delay_ms": 10}}]},
            "count must be in 0..10000",
        ),
        (
            {"stragglers": [{"paper": {"stragglers": 1, "delay_ms": 10, "occurrences": 1e300}}]},
            "occurrences must be in 1..10000",
        ),
        (
            {"stragglers": [{"workers": [0], "start": 0.1, "duration": 0.1, "delay_ms": 1e9}]},
            "delay_ms",
        ),
    ],
)
def test_every_size_is_bounded_with_one_line_naming_value_and_limit(values, fragment):
    with pytest.raises(ConfigError) as caught:
        make_config(values)
    message = str(caught.value)
    assert fragment in message and "\n" not in message and len(message) < 400


def test_workers_beyond_the_machine_are_refused_before_ray_starts(tmp_path):
    proc = run_cli(
        [
            "train",
            "--workers",
            "500",
            "--mnist1d-samples",
            "1000",
            "--no-progress",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    err = assert_one_line_exit_2(proc)
    assert "needs 502 Ray actors" in err and "this machine allows at most" in err


def test_search_parallel_is_bounded(capsys):
    err = one_line_error(capsys, ["search", "--parallel", "99999999"])
    assert "parallel = 99999999 is not allowed; it must be an integer in 1..64" in err


def test_search_parallel_beyond_the_machine_is_refused_before_ray_starts(tmp_path):
    proc = run_cli(
        [
            "search",
            "--parallel",
            "64",
            "--registry",
            str(tmp_path / "r.db"),
            "--search-dir",
            str(tmp_path / "s"),
            "--no-progress",
        ],
    )
    err = assert_one_line_exit_2(proc)
    assert "needs 640 Ray actors" in err


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--repeats", "1000000", "repeats = 1000000 is not allowed; it must be in 1..64"),
        ("--max-trials", "10000000", "max_trials = 10000000"),
        ("--tolerance", "inf", "tolerance = 'inf' is not allowed"),
        ("--resolution", "1e400", "resolution = '1e400' is not allowed"),
        ("--resolution", "1e-400", "resolution = 0.0 is not allowed"),
    ],
)
def test_search_sizes_are_bounded(flag, value, fragment):
    import argparse

    from syncswitch.cli.search import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["search", flag, value])
    with pytest.raises(ConfigError) as caught:
        options_from_args(args).spec(0)
    assert fragment in str(caught.value)


def alias_bomb() -> str:
    """The "billion laughs" in YAML: 9 levels of 9 aliases each, 9^9 strings when expanded."""
    lines = ["schedule:", "  - &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for previous, current in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  - &{current} [" + ", ".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_fast_in_bounded_memory(tmp_path: Path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert bomb.stat().st_size < 500
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match=r"anchors and aliases .* are not allowed"):
            make_config(load_config_file(bomb))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 2.0
    assert peak < 10 << 20


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        # numpy.ndarray((10**10,), 'u1'): the class called directly, 10 GB asked for
        (
            b"\x80\x02cnumpy\nndarray\nq\x00\x8a\x05\x00\xe4\x0bT\x02\x85q\x01X\x02\x00\x00\x00"
            b"u1q\x02\x86q\x03Rq\x04.",
            "calls numpy.ndarray directly",
        ),
        # numpy's own _reconstruct(ndarray, (10**10,), b'b'): the way arrays are pickled
        (
            b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
            b"\x8a\x05\x00\xe4\x0bT\x02\x85C\x01b\x87R.",
            "asks for an array of shape (10000000000,)",
        ),
    ],
)
def test_a_tiny_cifar_pickle_cannot_ask_for_a_huge_array(tmp_path: Path, payload, fragment):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(payload)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(WorkloadError, match="refusing to load") as caught:
        read_cifar("cifar10", tmp_path)
    assert fragment in str(caught.value)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 << 10


def test_a_cifar_file_larger_than_the_format_is_refused_before_reading(tmp_path: Path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    with (folder / "data_batch_1.bin").open("wb") as handle:
        handle.truncate(4 << 30)  # sparse: 4 GiB that take no disk
    with pytest.raises(WorkloadError, match="larger than any CIFAR file"):
        read_cifar("cifar10", tmp_path)
