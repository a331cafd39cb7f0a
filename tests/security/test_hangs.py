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
