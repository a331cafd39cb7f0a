"""Models of the sizes users train, for benchmarks/large_model.py: plain MLPs on MNIST-1D's
40-value samples (input shape (1, 40), 10 classes), named as `--model` import paths
(`wide_models:mlp17m`).

MLPs, not transformers: on a CPU their step is a few large matrix products, so a worker's
compute per parameter is as low as a model's gets and the parameter server's path (bytes per
step) is what the benchmark exposes. The 16.9M MLP is the one issue 43 measured.
"""

from __future__ import annotations

from torch import nn

INPUT = 40
CLASSES = 10


def mlp(*widths: int) -> nn.Sequential:
    """Flatten, then Linear+ReLU through `widths`, then a linear head."""
    layers: list[nn.Module] = [nn.Flatten()]
    previous = INPUT
    for width in widths:
        layers += [nn.Linear(previous, width), nn.ReLU()]
        previous = width
    layers.append(nn.Linear(previous, CLASSES))
    return nn.Sequential(*layers)


def mlp17m() -> nn.Sequential:
    """16,887,818 parameters (67.6 MB in float32)."""
    return mlp(2048, 4096, 2048)


def mlp100m() -> nn.Sequential:
    """100,990,986 parameters (404 MB in float32)."""
    return mlp(6144, 8192, 6144)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
