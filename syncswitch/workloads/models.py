"""The built-in classification models and their builders from a dataset's shape (registered
by name in catalog.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from syncswitch.errors import WorkloadError
from syncswitch.workloads.datasets import ArrayDataset


class Cnn1d(nn.Module):
    """Small 1-D CNN in the style of the MNIST-1D ConvBase baseline (~5k parameters)."""

    def __init__(self, input_length: int = 40, num_classes: int = 10, channels: int = 25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, channels, kernel_size=5, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        # Derived from a dummy pass so the head stays right for any input_length.
        with torch.no_grad():
            flat = self.features(torch.zeros(1, 1, input_length)).shape[1]
        self.head = nn.Linear(flat, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class _PadShortcut(nn.Module):
    """He et al.'s option-A shortcut: subsample spatially, zero-pad the new channels.

    Chosen over a 1x1 projection because it adds no parameters, which keeps ResNet-20/32 at
    the sizes reported in the paper (0.27M / 0.46M).
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.stride = stride
        extra = out_channels - in_channels
        self.pad_front = extra // 2
        self.pad_back = extra - self.pad_front

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        # F.pad pads trailing dims first: (W, W, H, H, C, C).
        return F.pad(x, (0, 0, 0, 0, self.pad_front, self.pad_back))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with a residual connection."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = _PadShortcut(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """CIFAR ResNet of depth 6n+2 (He et al. 2016, section 4.2): 3 stages of n blocks."""

    def __init__(self, depth: int, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise WorkloadError(f"CIFAR ResNet depth must be 6n+2 with n >= 1, got {depth}")
        blocks_per_stage = (depth - 2) // 6
        widths = (16, 32, 64)
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, 1, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        layers: list[nn.Module] = []
        channels = widths[0]
        for stage, width in enumerate(widths):
            for block in range(blocks_per_stage):
                # Each stage after the first halves the resolution in its first block.
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, width, stride))
                channels = width
        self.stages = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.stages(self.stem(x)))
        return self.head(torch.flatten(out, 1))


def resnet20(num_classes: int = 10) -> CifarResNet:
    return CifarResNet(20, num_classes)


def resnet32(num_classes: int = 10) -> CifarResNet:
    return CifarResNet(32, num_classes)


def cnn1d_for(dataset: ArrayDataset) -> Cnn1d:
    """cnn1d sized for `dataset`'s samples (1, length) and classes."""
    shape = dataset.input_shape
    if len(shape) != 2 or shape[0] != 1:
        raise WorkloadError(f"cnn1d needs samples of shape (1, length), got {shape}")
    return Cnn1d(input_length=shape[1], num_classes=dataset.num_classes)


def resnet_for(depth: int) -> Callable[[ArrayDataset], CifarResNet]:
    """The builder of the CIFAR ResNet of `depth` sized for a dataset's images and classes."""

    def build(dataset: ArrayDataset) -> CifarResNet:
        shape = dataset.input_shape
        if len(shape) != 3:
            raise WorkloadError(f"resnet{depth} needs image samples (C, H, W), got {shape}")
        return CifarResNet(depth, dataset.num_classes, in_channels=shape[0])

    return build
