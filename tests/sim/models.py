"""A model with everything a worker keeps besides its parameters: dropout draws from torch's
global RNG and BatchNorm keeps running statistics."""

from dataclasses import dataclass

import torch
from torch import nn


class NoisyNet(nn.Module):
    def __init__(self, length: int = 40, classes: int = 10) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(length, 32),
            nn.BatchNorm1d(32),
            nn.ReLU(),
            nn.Dropout(0.3),
            nn.Linear(32, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@dataclass(frozen=True)
class NoisyNetFactory:
    def __call__(self) -> nn.Module:
        return NoisyNet()
