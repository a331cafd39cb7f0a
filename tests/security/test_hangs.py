"""Issue 24 case 4: inputs that used to hang now end in one line, in bounded time."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from syncswitch.errors import UserError
from syncswitch.workloads import load_dataset

BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def cifar_dir(tmp_path: Path, payload: bytes) -> Path:
    """A CIFAR-10 python folder whose every batch is `payload`."""
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in BATCHES:
        (folder / name).write_bytes(payload)
    return tmp_path


def batch_pickle(labels: object) -> bytes:
    data = np.zeros((2, 3072), np.uint8)
    return pickle.dumps({b"data": data, b"labels": labels}, protocol=2)


def shared_labels() -> list:
    nested: list = [0]
    for _ in range(60):  # 2**60 leaves, a few hundred bytes pickled
        nested = [nested, nested]
    return nested


def recursive_labels() -> list:
    loop: list = [0]
    loop.append(loop)
    return loop


def tuple_dag_key() -> bytes:
    """{t: 1} where t = (t', t'), 80 levels deep: hashing t takes 2**80 steps. Written
    opcode by opcode (building it in Python would hash it)."""
    ops = b"\x80\x02)q\x00"  # PROTO 2, EMPTY_TUPLE, BINPUT 0
    for level in range(1, 80):
        ops += b"h" + bytes([level - 1]) + b"h" + bytes([level - 1]) + b"\x86q" + bytes([level])
    return ops + b"}hOK\x01s."  # EMPTY_DICT, BINGET 79, BININT1 1, SETITEM, STOP


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (batch_pickle(shared_labels()), "more than once"),
        (batch_pickle(recursive_labels()), "more than once"),
        (tuple_dag_key(), "more than once"),
        (batch_pickle([[0], [1]]), "flat list of integers"),
        (batch_pickle([0, 2**70]), "out of range"),
        (batch_pickle(list(range(70_000))), "at most"),
        (batch_pickle(np.zeros((2, 1), np.int64)), "1-D integers"),
    ],
    ids=["shared", "recursive", "tuple-hash", "nested", "huge-int", "too-many", "2-D"],
)
def test_a_hostile_cifar_batch_is_one_line_in_bounded_time(tmp_path, payload, fragment):
    root = cifar_dir(tmp_path, payload)
    started = time.monotonic()
    with pytest.raises(UserError) as error:
        load_dataset("cifar10", str(root))
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert fragment in message and "\n" not in message


def test_a_tracking_server_that_never_answers_is_one_line_within_seconds(tmp_path, monkeypatch):
    """A port that accepts and never replies (loopback): MLflow's defaults waited minutes."""
    import socket

    from syncswitch.loggers.feed import LoggerFeed
    from syncswitch.loggers.mlflow import HTTP_LIMITS, MlflowLogger

    for name in HTTP_LIMITS:
        monkeypatch.delenv(name, raising=False)
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    logger = MlflowLogger(tmp_path, f"http://127.0.0.1:{port}")
    feed = LoggerFeed([logger], on_failure=lambda name, reason: None)
    started = time.monotonic()
    try:
        with pytest.raises(UserError) as error:
            feed.start({"schedule": "bsp"}, None)
    finally:
        silent.close()
    assert time.monotonic() - started < 20
    assert "mlflow" in str(error.value) and "\n" not in str(error.value)


def big_run_dir(
    root: Path, name: str, switches: int, marks: int, workers: int, rows: int = 100
) -> Path:
    """A run directory written by hand: tens of thousands of switches and straggler events,
    many workers, a label with matplotlib markup in it."""
    import json

    from syncswitch.rundir import Switch
    from tests.rundir.samples import sample_summary

    run_dir = root / name
    run_dir.mkdir()
    summary = sample_summary(schedule="bsp:0.5,asp $\\frac{ [/]", switches=())
    (run_dir / "summary.json").write_text(json.dumps(summary.to_plain()))
    (run_dir / "config.json").write_text(json.dumps({"workers": workers}))
    lines = []
    for i in range(switches):
        protocols = ("bsp", "asp") if i % 2 == 0 else ("asp", "bsp")
        switch = Switch(i / switches, i, None, *protocols, time_s=10.0 * i / switches)
        lines.append(json.dumps({"event": "switch", **switch.to_plain()}))
    for i in range(marks):
        kind = "straggler_detected" if i % 2 == 0 else "straggler_recovered"
        lines.append(json.dumps({"event": kind, "worker": i % workers, "time_s": i / marks}))
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    lines = ["time_s,samples,fraction,version,protocol,test_accuracy,test_loss"]
    lines += [f"{i / 100},{i},{i / rows},{i},bsp,0.5,1.0" for i in range(rows)]
    (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
    return run_dir


def test_report_plot_of_huge_runs_is_bounded_and_says_what_it_left_out(tmp_path, capsys):
    from PIL import Image

    from syncswitch.cli.main import main

    runs = [big_run_dir(tmp_path, "run-0", 20_000, 20_000, 1024, rows=20_000)]
    runs += [big_run_dir(tmp_path, f"run-{i}", 50, 200, 1024) for i in range(1, 14)]
    plot = tmp_path / "out" / "report.png"
    started = time.monotonic()
    assert main(["report", *map(str, runs), "--plot", str(plot), "--plot-style", "dashboard"]) == 0
    assert time.monotonic() - started < 120
    out = capsys.readouterr().out
    assert "first 12 of 14 runs" in out and "thinned" in out
    width, height = Image.open(plot).size
    assert height <= 6000 and width <= 2000
    # The paper figure of the same runs: one job and schedule, so one line over 14 runs.
    started = time.monotonic()
    assert main(["report", *map(str, runs), "--plot", str(plot)]) == 0
    assert time.monotonic() - started < 120
    assert "switch markers thinned to 200" in capsys.readouterr().out
    assert Image.open(plot).size == (1000, 500)
