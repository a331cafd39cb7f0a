"""MNIST-1D generation, ArrayDataset validation and prepare_batch."""

from __future__ import annotations

import inspect
import random
import re

import mnist1d.data
import numpy as np
import pytest
import torch

import syncswitch.workloads.datasets as datasets_module
from syncswitch.workloads import (
    ArrayDataset,
    WorkloadError,
    dataset_names,
    load_dataset,
    prepare_batch,
)
from syncswitch.workloads.datasets import random_crop_flip

SMALL = 500  # enough samples for every class, and fast to generate


@pytest.fixture(scope="module")
def mnist() -> ArrayDataset:
    return load_dataset("mnist1d", mnist1d_samples=SMALL, mnist1d_seed=3)


def _cifar_like(n: int = 16, name: str = "cifar10", seed: int = 0) -> ArrayDataset:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    return ArrayDataset(name, x, y, x[:4].copy(), y[:4].copy(), 10, "cifar")


def test_mnist1d_shapes_and_dtypes(mnist: ArrayDataset) -> None:
    assert mnist.name == "mnist1d"
    assert mnist.x_train.shape == (400, 1, 40) and mnist.x_test.shape == (100, 1, 40)
    assert mnist.y_train.shape == (400,) and mnist.y_test.shape == (100,)
    assert mnist.x_train.dtype == np.float32 and mnist.x_test.dtype == np.float32
    assert mnist.y_train.dtype == np.int64 and mnist.y_test.dtype == np.int64
    assert mnist.num_classes == 10 and mnist.augment == "none"
    assert mnist.input_shape == (1, 40)
    assert set(np.unique(mnist.y_train)) <= set(range(10))


def test_mnist1d_default_size_split() -> None:
    data = load_dataset("mnist1d")
    assert len(data.x_train) == 4000 and len(data.x_test) == 1000


def test_mnist1d_is_deterministic_per_seed(mnist: ArrayDataset) -> None:
    again = load_dataset("mnist1d", mnist1d_samples=SMALL, mnist1d_seed=3)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(mnist, field), getattr(again, field))
    other = load_dataset("mnist1d", mnist1d_samples=SMALL, mnist1d_seed=4)
    assert not np.array_equal(mnist.x_train, other.x_train)


def test_mnist1d_leaves_global_rngs_alone() -> None:
    random.seed(123)
    np.random.seed(123)
    expected = (random.random(), np.random.rand())
    random.seed(123)
    np.random.seed(123)
    load_dataset("mnist1d", mnist1d_samples=20)
    assert (random.random(), np.random.rand()) == expected


def test_module_never_references_the_downloading_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = inspect.getsource(datasets_module)
    assert not re.search(r"\bget_dataset\b(?!_args)", source)

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("mnist1d.data.get_dataset downloads; it must not be called")

    monkeypatch.setattr(mnist1d.data, "get_dataset", forbidden)
    assert len(load_dataset("mnist1d", mnist1d_samples=20).x_train) == 16


def test_mnist1d_rejects_too_few_samples() -> None:
    with pytest.raises(WorkloadError, match="mnist1d_samples"):
        load_dataset("mnist1d", mnist1d_samples=5)


def test_unknown_dataset_lists_choices() -> None:
    with pytest.raises(WorkloadError) as err:
        load_dataset("imagenet")
    assert "imagenet" in str(err.value)
    assert all(name in str(err.value) for name in dataset_names(arrays_only=True))


def test_array_dataset_validates() -> None:
    x = np.zeros((4, 1, 40), np.float32)
    y = np.zeros(4, np.int64)
    with pytest.raises(WorkloadError, match="augmentation"):
        ArrayDataset("mnist1d", x, y, x, y, 10, augment="mixup")
    with pytest.raises(WorkloadError, match="malformed"):
        ArrayDataset("mnist1d", x, y[:3], x, y, 10)
    with pytest.raises(WorkloadError, match="differ in shape"):
        ArrayDataset("mnist1d", x, y, np.zeros((4, 1, 30), np.float32), y, 10)


def test_prepare_batch_mnist1d(mnist: ArrayDataset) -> None:
    xs, ys = mnist.x_train[:8], mnist.y_train[:8]
    for train in (False, True):
        x, y = prepare_batch(mnist, xs, ys, train=train)
        assert x.dtype == torch.float32 and x.shape == (8, 1, 40)
        assert y.dtype == torch.int64 and y.shape == (8,)
        np.testing.assert_array_equal(x.numpy(), xs)
        np.testing.assert_array_equal(y.numpy(), ys)
    x.add_(1.0)
    y.add_(1)
    np.testing.assert_array_equal(mnist.x_train[:8], xs)  # the dataset was not written to
    np.testing.assert_array_equal(mnist.y_train[:8], ys)


def test_prepare_batch_cifar_normalises_per_channel() -> None:
    data = _cifar_like()
    mean = np.array([0.4914, 0.4822, 0.4465], np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.2470, 0.2435, 0.2616], np.float32).reshape(1, 3, 1, 1)
    x, y = prepare_batch(data, data.x_test, data.y_test, train=False)
    assert x.dtype == torch.float32 and x.shape == (4, 3, 32, 32)
    assert y.dtype == torch.int64 and y.shape == (4,)
    expected = (data.x_test.astype(np.float32) / 255.0 - mean) / std
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_prepare_batch_cifar100_uses_its_own_statistics() -> None:
    c10, c100 = _cifar_like(name="cifar10"), _cifar_like(name="cifar100")
    x10, _ = prepare_batch(c10, c10.x_test, c10.y_test, train=False)
    x100, _ = prepare_batch(c100, c100.x_test, c100.y_test, train=False)
    assert not torch.allclose(x10, x100)


def test_eval_batches_are_never_augmented() -> None:
    data = _cifar_like()
    first, _ = prepare_batch(data, data.x_train, data.y_train, train=False)
    second, _ = prepare_batch(
        data, data.x_train, data.y_train, train=False, generator=torch.Generator().manual_seed(1)
    )
    assert torch.equal(first, second)


def test_augmentation_is_deterministic_for_a_seeded_generator() -> None:
    data = _cifar_like()
    plain, _ = prepare_batch(data, data.x_train, data.y_train, train=False)

    def augmented(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        x, _ = prepare_batch(data, data.x_train, data.y_train, train=True, generator=gen)
        return x

    a, b, c = augmented(7), augmented(7), augmented(8)
    assert a.shape == plain.shape and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a, plain)


def test_augmentation_only_for_cifar_augment_setting() -> None:
    data = _cifar_like()
    plain = ArrayDataset(
        data.name, data.x_train, data.y_train, data.x_test, data.y_test, 10, augment="none"
    )
    gen = torch.Generator().manual_seed(0)
    x_aug, _ = prepare_batch(plain, plain.x_train, plain.y_train, train=True, generator=gen)
    x_eval, _ = prepare_batch(plain, plain.x_train, plain.y_train, train=False)
    assert torch.equal(x_aug, x_eval)


def test_random_crop_flip_yields_padded_crops() -> None:
    images = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = random_crop_flip(images, 2, torch.Generator().manual_seed(5))
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for i in range(len(images)):
        candidates = [
            crop.flip(-1) if flip else crop
            for top in range(5)
            for left in range(5)
            for flip in (False, True)
            for crop in [padded[i, :, top : top + 8, left : left + 8]]
        ]
        assert any(torch.equal(out[i], cand) for cand in candidates)


def test_prepare_batch_rejects_mismatched_lengths(mnist: ArrayDataset) -> None:
    with pytest.raises(WorkloadError, match="labels"):
        prepare_batch(mnist, mnist.x_train[:4], mnist.y_train[:3], train=False)
