"""Model sizes, forward shapes and build_model validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from syncswitch.workloads import ArrayDataset, CifarResNet, Cnn1d, WorkloadError, model_names
from syncswitch.workloads import build_model as build


def _dataset(name: str, num_classes: int = 10) -> ArrayDataset:
    shape = (1, 40) if name == "mnist1d" else (3, 32, 32)
    dtype = np.float32 if name == "mnist1d" else np.uint8
    x = np.zeros((4, *shape), dtype)
    y = np.zeros(4, np.int64)
    augment = "none" if name == "mnist1d" else "cifar"
    return ArrayDataset(name, x, y, x, y, num_classes, augment)


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "dataset", "low", "high"),
    [
        ("cnn1d", "mnist1d", 5_000, 8_000),
        ("resnet20", "cifar10", 260_000, 280_000),
        ("resnet32", "cifar10", 450_000, 475_000),
    ],
)
def test_parameter_counts(name: str, dataset: str, low: int, high: int) -> None:
    assert low <= _params(build(name, _dataset(dataset))) <= high


def test_cnn1d_forward_shape() -> None:
    model = build("cnn1d", _dataset("mnist1d"))
    assert model(torch.randn(8, 1, 40)).shape == (8, 10)


def test_cnn1d_adapts_head_to_input_length() -> None:
    assert Cnn1d(input_length=64, num_classes=3)(torch.randn(2, 1, 64)).shape == (2, 3)


@pytest.mark.parametrize("name", ["resnet20", "resnet32"])
@pytest.mark.parametrize(("dataset", "classes"), [("cifar10", 10), ("cifar100", 100)])
def test_resnet_forward_and_backward(name: str, dataset: str, classes: int) -> None:
    model = build(name, _dataset(dataset, classes))
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, classes)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_resnet_shortcuts_are_parameter_free() -> None:
    # Option A adds no 1x1 projections: just the stem conv plus two 3x3 convs per block.
    model = CifarResNet(20)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 19
    assert all(m.kernel_size == (3, 3) for m in convs)


def test_resnet_uses_kaiming_init() -> None:
    torch.manual_seed(0)
    conv = CifarResNet(20).stages[-1].conv2
    fan_in = conv.in_channels * 9
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / fan_in), rel=0.1)


def test_resnet_rejects_bad_depth() -> None:
    with pytest.raises(WorkloadError, match="6n\\+2"):
        CifarResNet(21)


def test_unknown_model_lists_choices() -> None:
    with pytest.raises(WorkloadError) as err:
        build("vgg16", _dataset("cifar10"))
    assert "vgg16" in str(err.value)
    assert all(name in str(err.value) for name in model_names())


@pytest.mark.parametrize(
    ("model", "dataset"),
    [("cnn1d", "cifar10"), ("cnn1d", "cifar100"), ("resnet20", "mnist1d"), ("resnet32", "mnist1d")],
)
def test_mismatched_dataset_is_refused(model: str, dataset: str) -> None:
    with pytest.raises(WorkloadError) as err:
        build(model, _dataset(dataset))
    message = str(err.value)
    assert model in message and dataset in message
