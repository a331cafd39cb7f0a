"""Local CIFAR reading from tiny fake datasets in both official layouts."""

from __future__ import annotations

import builtins
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from syncswitch.workloads import ArrayDataset, WorkloadError, load_dataset

N_TRAIN, N_TEST = 20, 10
CIFAR10_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)


def _labels(n: int, classes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, classes, n).astype(np.int64)


def _splits(classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (
        _images(N_TRAIN, 1),
        _labels(N_TRAIN, classes, 2),
        _images(N_TEST, 3),
        _labels(N_TEST, classes, 4),
    )


def _write_binary(path: Path, images: np.ndarray, *label_columns: np.ndarray) -> None:
    labels = np.stack(label_columns, axis=1).astype(np.uint8)
    records = np.concatenate([labels, images.reshape(len(images), -1)], axis=1)
    path.write_bytes(records.tobytes())


def _write_pickle(path: Path, batch: object, protocol: int = 2, legacy: bool = False) -> None:
    payload = pickle.dumps(batch, protocol=protocol)
    if legacy:
        # Files pickled under numpy 1.x name numpy.core rather than numpy._core.
        payload = payload.replace(b"numpy._core", b"numpy.core")
    path.write_bytes(payload)


def _cifar10_binary(root: Path, classes: int = 10) -> tuple[np.ndarray, ...]:
    folder = root / "cifar-10-batches-bin"
    folder.mkdir()
    x_tr, y_tr, x_te, y_te = _splits(classes)
    for i, name in enumerate(CIFAR10_TRAIN):
        rows = slice(4 * i, 4 * i + 4)
        _write_binary(folder / f"{name}.bin", x_tr[rows], y_tr[rows])
    _write_binary(folder / "test_batch.bin", x_te, y_te)
    return x_tr, y_tr, x_te, y_te


def _cifar10_python(root: Path, protocol: int = 2, legacy: bool = False) -> tuple[np.ndarray, ...]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    x_tr, y_tr, x_te, y_te = _splits(10)

    def batch(x: np.ndarray, y: np.ndarray) -> dict[bytes, object]:
        return {
            b"batch_label": b"fake batch",
            b"labels": [int(v) for v in y],
            b"data": x.reshape(len(x), -1),
            b"filenames": [f"img_{i}.png".encode() for i in range(len(x))],
        }

    for i, name in enumerate(CIFAR10_TRAIN):
        rows = slice(4 * i, 4 * i + 4)
        _write_pickle(folder / name, batch(x_tr[rows], y_tr[rows]), protocol, legacy)
    _write_pickle(folder / "test_batch", batch(x_te, y_te), protocol, legacy)
    return x_tr, y_tr, x_te, y_te


def _assert_loaded(data: ArrayDataset, expected: tuple[np.ndarray, ...], classes: int) -> None:
    x_tr, y_tr, x_te, y_te = expected
    assert data.x_train.dtype == np.uint8 and data.x_train.shape == (N_TRAIN, 3, 32, 32)
    assert data.y_train.dtype == np.int64 and data.y_test.dtype == np.int64
    np.testing.assert_array_equal(data.x_train, x_tr)
    np.testing.assert_array_equal(data.y_train, y_tr)
    np.testing.assert_array_equal(data.x_test, x_te)
    np.testing.assert_array_equal(data.y_test, y_te)
    assert data.num_classes == classes
    assert data.augment == "cifar"
    assert data.input_shape == (3, 32, 32)


def test_cifar10_binary_layout(tmp_path: Path) -> None:
    expected = _cifar10_binary(tmp_path)
    data = load_dataset("cifar10", str(tmp_path))
    assert data.name == "cifar10"
    _assert_loaded(data, expected, 10)


def test_data_dir_may_be_the_layout_folder_itself(tmp_path: Path) -> None:
    expected = _cifar10_binary(tmp_path)
    _assert_loaded(load_dataset("cifar10", str(tmp_path / "cifar-10-batches-bin")), expected, 10)


def test_cifar100_binary_layout_uses_fine_labels(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-binary"
    folder.mkdir()
    x_tr, y_tr, x_te, y_te = _splits(100)
    coarse_tr, coarse_te = y_tr % 20, y_te % 20
    _write_binary(folder / "train.bin", x_tr, coarse_tr, y_tr)
    _write_binary(folder / "test.bin", x_te, coarse_te, y_te)
    _assert_loaded(load_dataset("cifar100", str(tmp_path)), (x_tr, y_tr, x_te, y_te), 100)


@pytest.mark.parametrize(("protocol", "legacy"), [(2, False), (2, True), (4, False), (5, False)])
def test_cifar10_python_layout(tmp_path: Path, protocol: int, legacy: bool) -> None:
    expected = _cifar10_python(tmp_path, protocol, legacy)
    _assert_loaded(load_dataset("cifar10", str(tmp_path)), expected, 10)


def test_cifar100_python_layout(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    x_tr, y_tr, x_te, y_te = _splits(100)
    for name, x, y in (("train", x_tr, y_tr), ("test", x_te, y_te)):
        batch = {
            b"data": x.reshape(len(x), -1),
            b"fine_labels": [int(v) for v in y],
            b"coarse_labels": [int(v) % 20 for v in y],
        }
        _write_pickle(folder / name, batch)
    _assert_loaded(load_dataset("cifar100", str(tmp_path)), (x_tr, y_tr, x_te, y_te), 100)


def test_missing_directory_names_path_and_layouts(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(WorkloadError) as err:
        load_dataset("cifar10", str(missing))
    message = str(err.value)
    assert str(missing) in message
    assert "cifar-10-batches-bin" in message and "cifar-10-batches-py" in message
    assert "never downloads" in message


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_data_dir_is_required(name: str) -> None:
    with pytest.raises(WorkloadError, match="never downloads"):
        load_dataset(name)


def test_missing_batch_file_is_named(tmp_path: Path) -> None:
    _cifar10_binary(tmp_path)
    victim = tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin"
    victim.unlink()
    with pytest.raises(WorkloadError) as err:
        load_dataset("cifar10", str(tmp_path))
    assert str(victim) in str(err.value)


@pytest.mark.parametrize("keep", [0, 3073 * 2 + 100])
def test_truncated_binary_file_is_refused(tmp_path: Path, keep: int) -> None:
    _cifar10_binary(tmp_path)
    victim = tmp_path / "cifar-10-batches-bin" / "test_batch.bin"
    victim.write_bytes(victim.read_bytes()[:keep])
    with pytest.raises(WorkloadError) as err:
        load_dataset("cifar10", str(tmp_path))
    assert str(victim) in str(err.value) and "truncated" in str(err.value)


def test_out_of_range_binary_labels_are_refused(tmp_path: Path) -> None:
    _cifar10_binary(tmp_path, classes=50)  # CIFAR-10 records cannot carry labels >= 10
    with pytest.raises(WorkloadError, match="labels"):
        load_dataset("cifar10", str(tmp_path))


def test_truncated_pickle_is_refused(tmp_path: Path) -> None:
    _cifar10_python(tmp_path)
    victim = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    victim.write_bytes(victim.read_bytes()[:500])
    with pytest.raises(WorkloadError) as err:
        load_dataset("cifar10", str(tmp_path))
    assert str(victim) in str(err.value) and "corrupt" in str(err.value)


def test_pickle_without_data_is_refused(tmp_path: Path) -> None:
    _cifar10_python(tmp_path)
    _write_pickle(tmp_path / "cifar-10-batches-py" / "test_batch", {b"labels": [1, 2]})
    with pytest.raises(WorkloadError, match="'data'"):
        load_dataset("cifar10", str(tmp_path))


class _SystemCall:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.command,))


class _EvalCall:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (builtins.eval, (f"__import__('os').system({self.command!r})",))


@pytest.mark.parametrize("payload_type", [_SystemCall, _EvalCall])
@pytest.mark.parametrize("nested", [False, True])
def test_malicious_pickle_is_refused_without_running_code(
    tmp_path: Path, payload_type: type, nested: bool
) -> None:
    _cifar10_python(tmp_path)
    marker = tmp_path / "marker"
    payload = payload_type(f"touch '{marker}'")
    if nested:
        # Hidden inside an otherwise plausible batch, where a lax loader might not look.
        payload = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": payload}
    victim = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    victim.write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(WorkloadError) as err:
        load_dataset("cifar10", str(tmp_path))
    assert str(victim) in str(err.value) and "refusing" in str(err.value)
    assert not marker.exists()
