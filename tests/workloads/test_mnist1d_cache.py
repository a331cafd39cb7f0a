"""MNIST-1D's arrays from the per-user cache are the generated ones, bit for bit; a cache
file that is not exactly what it should be is never believed: the arrays are generated again
and the file replaced."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from syncswitch.workloads import load_dataset, mnist1d_cache
from syncswitch.workloads.datasets import _generate_mnist1d

SAMPLES, SEED = 200, 3


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(mnist1d_cache.ENV_VAR, str(tmp_path / "cache"))
    return tmp_path / "cache" / "mnist1d"


@pytest.fixture(scope="module")
def generated() -> dict[str, np.ndarray]:
    return _generate_mnist1d(SAMPLES, SEED)


def no_generation(monkeypatch) -> None:
    import mnist1d.data

    def refuse(*args, **kwargs):
        raise AssertionError("generated, though the cache holds the arrays")

    monkeypatch.setattr(mnist1d.data, "make_dataset", refuse)


def assert_same(dataset, arrays) -> None:
    for name in ("x_train", "y_train", "x_test", "y_test"):
        mine = getattr(dataset, name) if not isinstance(dataset, dict) else dataset[name]
        assert mine.dtype == arrays[name].dtype and mine.shape == arrays[name].shape
        np.testing.assert_array_equal(mine, arrays[name])


def the_file(cache: Path) -> Path:
    (path,) = cache.iterdir()
    return path


def test_cached_arrays_are_the_generated_ones(cache, generated, monkeypatch) -> None:
    first = load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED)
    path = the_file(cache)
    assert path.name.startswith("mnist1d-") and f"-n{SAMPLES}-seed{SEED}-" in path.name
    no_generation(monkeypatch)
    second = load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED)
    assert_same(first, generated)
    assert_same(second, generated)
    assert second.x_train.flags.c_contiguous and second.x_train.flags.writeable


def test_each_sample_count_and_seed_has_its_own_file(cache, generated) -> None:
    load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED)
    other = load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED + 1)
    load_dataset("mnist1d", mnist1d_samples=SAMPLES + 10, mnist1d_seed=SEED)
    assert len(list(cache.iterdir())) == 3
    assert not np.array_equal(other.x_train, generated["x_train"])


def test_loading_from_the_cache_leaves_the_global_generators_alone(cache) -> None:
    load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED)
    np.random.seed(7)
    expected = np.random.rand(3)
    np.random.seed(7)
    load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED)
    np.testing.assert_array_equal(np.random.rand(3), expected)


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def compressed(arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def with_extra_member(arrays) -> bytes:
    data = io.BytesIO(npz(**arrays))
    with zipfile.ZipFile(data, "a") as archive:
        archive.writestr("extra.npy", b"x")
    return data.getvalue()


BROKEN = {
    "torn": lambda a: npz(**a)[:1000],
    "empty": lambda a: b"",
    "not a zip": lambda a: b"PK" + os.urandom(100),
    "a member missing": lambda a: npz(**{k: v for k, v in a.items() if k != "y_test"}),
    "an extra member": with_extra_member,
    "compressed": compressed,
    "float64": lambda a: npz(**{**a, "x_train": a["x_train"].astype(np.float64)}),
    "another shape": lambda a: npz(**{**a, "x_train": a["x_train"][:, :, :20]}),
    "fewer samples": lambda a: npz(**{**a, "y_train": a["y_train"][:-1]}),
    "a label out of range": lambda a: npz(**{**a, "y_test": a["y_test"] * 0 + 10}),
    "not finite": lambda a: npz(**{**a, "x_test": a["x_test"] * np.nan}),
    "objects (pickle)": lambda a: npz(**{**a, "y_train": a["y_train"].astype(object)}),
    "too large": lambda a: npz(**a) + b"\0" * mnist1d_cache.max_bytes(SAMPLES),
}


@pytest.mark.parametrize("damage", BROKEN, ids=list(BROKEN))
def test_a_bad_cache_file_is_regenerated_and_replaced(cache, generated, damage) -> None:
    load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED)
    path = the_file(cache)
    path.write_bytes(BROKEN[damage](generated))
    assert mnist1d_cache.read(path, SAMPLES) is None
    assert_same(load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED), generated)
    assert_same(mnist1d_cache.read(path, SAMPLES), generated)  # replaced by a good one


def test_a_directory_or_fifo_in_its_place_is_not_read(cache, generated) -> None:
    cache.mkdir(parents=True)
    path = mnist1d_cache.cache_path(SAMPLES, SEED)
    assert path is not None
    os.mkfifo(path)  # would block a plain open() forever
    assert mnist1d_cache.read(path, SAMPLES) is None
    assert_same(load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED), generated)


def test_off_or_unwritable_the_cache_costs_nothing_but_time(tmp_path, monkeypatch, generated):
    monkeypatch.setenv(mnist1d_cache.ENV_VAR, "off")
    assert mnist1d_cache.cache_path(SAMPLES, SEED) is None
    assert_same(load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED), generated)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(mnist1d_cache.ENV_VAR, str(blocked))
    assert_same(load_dataset("mnist1d", mnist1d_samples=SAMPLES, mnist1d_seed=SEED), generated)
