import collections
import hashlib
import io
import json
import os
import pickle
import random
from enum import StrEnum
from pathlib import Path

import numpy as np
import pytest
import torch

from syncswitch.core.reliability.checkpoints import (
    CheckpointError,
    CheckpointStore,
    NoCheckpointError,
    PlainDataError,
    RefusalKind,
    check_plain,
)
from tests.core.rng_state import (
    numpy_rng_state,
    python_rng_state,
    restore_numpy_rng,
    restore_python_rng,
    restore_torch_rng,
    torch_rng_state,
)


def _realistic_state(params: int = 5_210) -> dict:
    gen = torch.Generator().manual_seed(7)
    return {
        "weights": torch.randn(params, generator=gen),
        "optimizer": {"momentum_buffer": torch.randn(params, generator=gen), "lr": 0.05},
        "protocol": {"phase_index": 1, "name": "asp", "switches": [{"at": 0.25, "to": "asp"}]},
        "policy": {"detector": {"window": [0.02, 0.021, 0.019], "flagged": []}, "last": None},
        "samples": 123_456,
        "progress": 0.4321,
        "done": False,
        "pair": (1, "two", 3.0),
        "rng": {
            "python": python_rng_state(random.Random(11)),
            "numpy": numpy_rng_state(np.random.default_rng(12)),
            "torch": torch_rng_state(torch.Generator().manual_seed(13)),
        },
    }


def _assert_same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


# -- check_plain -----------------------------------------------------------------------------


class Color(StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (collections.deque([1.0]), "state['policy']['detector'] is a collections.deque"),
        (np.zeros(3), "convert it with torch.from_numpy"),
        (np.float64(1.0), "is a numpy.float64; checkpoints hold"),
        (Color.RED, "(a str subclass); store str(x)"),
        ({1, 2}, "store a sorted list"),
        (collections.OrderedDict(a=1), "is a collections.OrderedDict"),
        (b"raw", "is a bytes"),
        (torch.nn.Parameter(torch.zeros(2)), "is a torch.nn.parameter.Parameter"),
        (torch.zeros(3).to_sparse(), "sparse_coo tensor"),
        (lambda: 0, "is a function"),
    ],
)
def test_check_plain_names_the_offending_entry(value, words) -> None:
    with pytest.raises(PlainDataError, match=r"checkpoints hold|dense tensors") as err:
        check_plain({"policy": {"detector": value}})
    assert "state['policy']['detector']" in str(err.value)
    assert words in str(err.value)


def test_check_plain_paths_keys_and_cycles() -> None:
    with pytest.raises(PlainDataError, match=r"state\['a'\]\[2\] is a complex"):
        check_plain({"a": [1, 2, 3j]})
    with pytest.raises(PlainDataError, match=r"state\['opt'\] has key 0 of type int"):
        check_plain({"opt": {0: torch.zeros(1)}})
    loop: list = []
    loop.append(loop)
    with pytest.raises(PlainDataError, match="contains itself"):
        check_plain({"loop": loop})
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(PlainDataError, match="nested deeper than 64"):
        check_plain({"deep": deep})
    with pytest.raises(PlainDataError, match="a checkpoint must be a dict"):
        check_plain([1, 2])
    # Shared (not cyclic) references are fine, as are NaN and inf.
    shared = [1.0]
    check_plain({"a": shared, "b": shared, "nan": float("nan"), "inf": float("inf")})
    check_plain(_realistic_state())


# -- RNG state -------------------------------------------------------------------------------


def test_python_rng_round_trip() -> None:
    rng = random.Random(5)
    rng.gauss(0, 1)  # leaves a cached gauss_next in the state
    data = python_rng_state(rng)
    check_plain({"rng": data})
    expected = [rng.random() for _ in range(5)]
    other = random.Random(99)
    restore_python_rng(other, data)
    assert [other.random() for _ in range(5)] == expected
    with pytest.raises(ValueError, match="python RNG state"):
        restore_python_rng(other, {"version": 3})


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.MT19937, np.random.Philox])
def test_numpy_rng_round_trip(bit_generator) -> None:
    gen = np.random.Generator(bit_generator(5))
    gen.random(3)
    data = numpy_rng_state(gen)
    check_plain({"rng": data})
    expected = gen.random(4)
    other = np.random.Generator(bit_generator(99))
    restore_numpy_rng(other, data)
    np.testing.assert_array_equal(other.random(4), expected)


def test_numpy_rng_refuses_a_different_bit_generator() -> None:
    data = numpy_rng_state(np.random.default_rng(1))
    with pytest.raises(ValueError, match="numpy RNG state for MT19937"):
        restore_numpy_rng(np.random.Generator(np.random.MT19937(1)), data)


def test_torch_rng_round_trip() -> None:
    gen = torch.Generator().manual_seed(3)
    torch.rand(2, generator=gen)
    data = torch_rng_state(gen)
    expected = torch.rand(4, generator=gen)
    other = torch.Generator().manual_seed(4)
    restore_torch_rng(other, data)
    assert torch.equal(torch.rand(4, generator=other), expected)
    with pytest.raises(ValueError, match="1-D uint8 tensor"):
        restore_torch_rng(other, torch.zeros(3))


def test_global_torch_rng_round_trip() -> None:
    saved = torch_rng_state()
    try:
        expected = torch.rand(3)
        restore_torch_rng(None, saved)
        assert torch.equal(torch.rand(3), expected)
    finally:
        restore_torch_rng(None, saved)


# -- the store: happy path -------------------------------------------------------------------


def test_round_trip_of_a_realistic_state(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    state = _realistic_state()
    info = store.save(state, samples=123_456, label="periodic", meta={"progress": 0.43})
    loaded = store.load_latest()
    _assert_same(loaded.state, state)
    assert loaded.info == info
    assert loaded.refused == []
    assert info.to_plain()["file"] == "checkpoint-000001.pt"
    manifest = json.loads(info.manifest_path.read_text())
    assert manifest["sha256"] == hashlib.sha256(info.path.read_bytes()).hexdigest()
    assert manifest["bytes"] == info.path.stat().st_size
    assert (manifest["samples"], manifest["label"], manifest["meta"]) == (
        123_456,
        "periodic",
        {"progress": 0.43},
    )
    assert manifest["format_version"] == 1

    # The restored RNG states continue the same streams.
    python = random.Random()
    restore_python_rng(python, loaded.state["rng"]["python"])
    assert python.random() == random.Random(11).random()
    gen = np.random.default_rng()
    restore_numpy_rng(gen, loaded.state["rng"]["numpy"])
    assert gen.random() == np.random.default_rng(12).random()


def test_keeps_the_newest_two(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for samples in (100, 200, 300, 400):
        store.save({"samples": samples}, samples=samples)
    assert store.sequences() == [4, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-000003.json",
        "checkpoint-000003.pt",
        "checkpoint-000004.json",
        "checkpoint-000004.pt",
    ]
    assert store.load_latest().state == {"samples": 400}
    assert CheckpointStore(tmp_path, keep=3).save({}, samples=500).sequence == 5


def test_save_validates_before_writing(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    with pytest.raises(PlainDataError, match=r"state\['q'\] is a collections.deque"):
        store.save({"q": collections.deque()}, samples=1)
    with pytest.raises(ValueError, match="samples -1 must be an int >= 0"):
        store.save({}, samples=-1)
    with pytest.raises(ValueError, match="label 'Bad Label' must be"):
        store.save({}, samples=1, label="Bad Label")
    with pytest.raises(ValueError, match=r"meta .* must be plain JSON"):
        store.save({}, samples=1, meta={"x": object()})
    assert not (tmp_path / "ckpt").exists()
    with pytest.raises(ValueError, match="keep=1: must be >= 2"):
        CheckpointStore(tmp_path, keep=1)


def test_leftover_temp_files_are_removed_and_never_loaded(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    (tmp_path / ".checkpoint-abc.tmp").write_bytes(b"half a checkpoint")
    store.save({"a": 1}, samples=1)
    assert not (tmp_path / ".checkpoint-abc.tmp").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# -- the store: damage and fallback ----------------------------------------------------------


def _two(tmp_path: Path):
    store = CheckpointStore(tmp_path)
    old = store.save({"which": "old", "w": torch.arange(1000.0)}, samples=10)
    new = store.save({"which": "new", "w": torch.arange(1000.0) + 1}, samples=20)
    return store, old, new


def test_truncated_newest_falls_back_to_previous(tmp_path: Path) -> None:
    store, old, new = _two(tmp_path)
    data = new.path.read_bytes()
    new.path.write_bytes(data[: len(data) // 2])
    loaded = store.load_latest()
    assert loaded.state["which"] == "old" and loaded.info == old
    [refusal] = loaded.refused
    assert refusal.path == new.path and refusal.kind is RefusalKind.TRUNCATED
    assert refusal.reason == f"truncated: {len(data) // 2} of {len(data)} bytes"


def test_one_flipped_byte_is_refused_as_altered(tmp_path: Path) -> None:
    store, _, new = _two(tmp_path)
    data = bytearray(new.path.read_bytes())
    data[len(data) // 2] ^= 0x01
    new.path.write_bytes(bytes(data))
    loaded = store.load_latest()
    assert loaded.state["which"] == "old"
    assert loaded.refused[0].kind is RefusalKind.ALTERED
    assert "sha256" in loaded.refused[0].reason and "differs" in loaded.refused[0].reason


def test_appended_bytes_are_refused_as_altered(tmp_path: Path) -> None:
    store, _, new = _two(tmp_path)
    with new.path.open("ab") as handle:
        handle.write(b"x")
    assert store.load_latest().refused[0].kind is RefusalKind.ALTERED


def test_missing_manifest_is_refused(tmp_path: Path) -> None:
    store, _, new = _two(tmp_path)
    new.manifest_path.unlink()
    loaded = store.load_latest()
    assert loaded.state["which"] == "old"
    assert loaded.refused[0].kind is RefusalKind.MISSING_MANIFEST
    assert "checkpoint-000002.json" in loaded.refused[0].reason


def test_missing_data_and_bad_manifests_are_refused(tmp_path: Path) -> None:
    store, _, new = _two(tmp_path)
    new.path.unlink()
    assert store.load_latest().refused[0].kind is RefusalKind.MISSING_DATA
    for text in ("{not json", '{"format": "other"}', "[]"):
        new.manifest_path.write_text(text)
        refusal = store.load_latest().refused[0]
        assert refusal.kind is RefusalKind.BAD_MANIFEST, text


def test_manifest_cannot_redirect_the_file_read(tmp_path: Path) -> None:
    store, _, new = _two(tmp_path)
    manifest = json.loads(new.manifest_path.read_text())
    manifest["file"] = "../../etc/passwd"
    new.manifest_path.write_text(json.dumps(manifest))
    refusal = store.load_latest().refused[0]
    assert refusal.kind is RefusalKind.BAD_MANIFEST and "etc/passwd" in refusal.reason


def test_newer_format_is_refused(tmp_path: Path) -> None:
    store, _, new = _two(tmp_path)
    manifest = json.loads(new.manifest_path.read_text())
    manifest["format_version"] = 99
    new.manifest_path.write_text(json.dumps(manifest))
    assert store.load_latest().refused[0].kind is RefusalKind.NEWER_FORMAT


def test_none_valid_raises_one_line_listing_each(tmp_path: Path) -> None:
    store, old, new = _two(tmp_path)
    old.path.write_bytes(old.path.read_bytes()[:10])
    new.manifest_path.unlink()
    with pytest.raises(CheckpointError) as err:
        store.load_latest()
    message = str(err.value)
    assert "\n" not in message
    assert "no valid checkpoint" in message and "2 refused" in message
    assert "checkpoint-000002.pt: missing manifest" in message
    assert "checkpoint-000001.pt: truncated: 10 of" in message
    assert [r.kind for r in err.value.refused] == [
        RefusalKind.MISSING_MANIFEST,
        RefusalKind.TRUNCATED,
    ]


def test_max_samples_picks_a_checkpoint_from_before_a_point(tmp_path: Path) -> None:
    """A rollback wants the newest checkpoint from before the loss began to rise."""
    store = CheckpointStore(tmp_path, keep=4)
    for samples in (100, 200, 300):
        store.save({"samples": samples}, samples=samples)
    loaded = store.load_latest(max_samples=250)
    assert loaded.state == {"samples": 200} and loaded.refused == []
    assert store.load_latest(max_samples=300).state == {"samples": 300}
    (tmp_path / "checkpoint-000002.pt").write_bytes(b"")  # damaged: falls back further
    loaded = store.load_latest(max_samples=250)
    assert loaded.state == {"samples": 100}
    assert [r.kind for r in loaded.refused] == [RefusalKind.TRUNCATED]
    with pytest.raises(NoCheckpointError, match="no checkpoint taken at or before 50 samples"):
        store.load_latest(max_samples=50)


def test_empty_or_absent_directory(tmp_path: Path) -> None:
    with pytest.raises(NoCheckpointError, match="no checkpoint in"):
        CheckpointStore(tmp_path / "absent").load_latest()
    with pytest.raises(NoCheckpointError):
        CheckpointStore(tmp_path).load_latest()


# -- the store: hostile content with a correct hash ------------------------------------------


class _Payload:
    """Unpickling this runs a shell command that creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant(store: CheckpointStore, data: bytes) -> Path:
    """Write `data` as the newest checkpoint with a manifest whose hash matches it."""
    info = store.save({"placeholder": 0}, samples=1)
    info.path.write_bytes(data)
    manifest = json.loads(info.manifest_path.read_text())
    manifest["sha256"] = hashlib.sha256(data).hexdigest()
    manifest["bytes"] = len(data)
    info.manifest_path.write_text(json.dumps(manifest))
    return info.path


def _torch_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def test_the_payload_is_live(tmp_path: Path) -> None:
    """Control: the payload does run under an ordinary unpickle, so the tests below mean it."""
    marker = tmp_path / "ran"
    torch.load(io.BytesIO(_torch_bytes({"p": _Payload(marker)})), weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("container", ["torch_zip", "raw_pickle"])
def test_code_execution_payload_with_correct_hash_is_refused(tmp_path: Path, container) -> None:
    marker = tmp_path / "payload-ran"
    store = CheckpointStore(tmp_path / "ckpt")
    store.save({"which": "good"}, samples=1)
    hostile = {"weights": torch.zeros(4), "p": _Payload(marker)}
    data = _torch_bytes(hostile) if container == "torch_zip" else pickle.dumps(hostile, protocol=2)
    path = _plant(store, data)
    loaded = store.load_latest()
    assert not marker.exists()
    assert loaded.state == {"which": "good"}
    [refusal] = loaded.refused
    assert refusal.path == path and refusal.kind is RefusalKind.UNSAFE_CONTENT
    assert refusal.reason.startswith("unsafe content: ")
    assert "GLOBAL" in refusal.reason and "weights_only=False" not in refusal.reason


def test_loadable_but_not_plain_content_is_refused(tmp_path: Path) -> None:
    """weights_only admits a few types (OrderedDict, set, complex) that are not plain data."""
    store = CheckpointStore(tmp_path)
    store.save({"which": "good"}, samples=1)
    _plant(store, _torch_bytes({"s": {1, 2}}))
    refusal = store.load_latest().refused[0]
    assert refusal.kind is RefusalKind.UNSAFE_CONTENT and "is a set" in refusal.reason


def test_foreign_bytes_with_correct_hash_are_not_a_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save({"which": "good"}, samples=1)
    _plant(store, b"this is not a checkpoint at all" * 10)
    loaded = store.load_latest()
    assert loaded.state == {"which": "good"}
    assert loaded.refused[0].kind is RefusalKind.NOT_A_CHECKPOINT
    assert loaded.refused[0].reason.startswith("not a checkpoint: ")
