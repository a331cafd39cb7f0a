"""Which optimizer the parameter server steps its weights with, and the one way one is built.

Every shard builds its own over its slice; all of them are elementwise, so n shards together
take exactly the step one would over the whole vector. Learning rate and momentum (Adam's
beta1) come with each step, because the configuration policy changes them with the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import torch

from syncswitch.core.sync.adam import FlatAdam
from syncswitch.core.sync.optimizer import FlatSGD

ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults


def default_lr(kind: str) -> float:
    """The learning rate of a job that names none: SGD's is this project's long-standing 0.2
    (momentum 0.9, the built-in CNN); Adam's and AdamW's is 1e-3, torch.optim.Adam's own, as
    an Adam step's length does not scale with the gradient (0.2 makes it diverge)."""
    return 0.2 if kind == OptimizerKind.SGD else 1e-3


class OptimizerKind(StrEnum):
    SGD = "sgd"  # momentum SGD, L2 weight decay (torch.optim.SGD)
    ADAM = "adam"  # L2 weight decay added to the gradient (torch.optim.Adam)
    ADAMW = "adamw"  # decoupled weight decay (torch.optim.AdamW)


@dataclass(frozen=True)
class OptimizerConfig:
    kind: OptimizerKind = OptimizerKind.SGD
    weight_decay: float = 0.0
    beta2: float = 0.999  # Adam's; its beta1 is the run's momentum (see SyncConfig.momentum)
    eps: float = 1e-8  # Adam's
    # Clip each gradient a step is made with to this global norm (core/sync/clipping.py):
    # the servers' updates and a local phase's inner steps alike. None: off.
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        if self.max_grad_norm is not None and not self.max_grad_norm > 0.0:
            raise ValueError(f"max_grad_norm {self.max_grad_norm} must be > 0")
        if not 0.0 <= self.beta2 < 1.0:
            raise ValueError(f"beta2 {self.beta2} must be in [0, 1)")
        if not self.eps > 0.0:
            raise ValueError(f"eps {self.eps} must be > 0")

    @property
    def is_adam(self) -> bool:
        return self.kind is not OptimizerKind.SGD


class ServerOptimizer(Protocol):
    """What the synchronizer asks of an optimizer (FlatSGD and FlatAdam)."""

    @property
    def weights(self) -> torch.Tensor: ...

    @property
    def weight_decay(self) -> float: ...

    def weights_on_cpu(self) -> torch.Tensor: ...

    def adopt(self, buffer: torch.Tensor) -> None: ...

    def reset_momentum(self) -> None: ...

    def step(self, gradient: torch.Tensor, *, lr: float, momentum: float) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def make_optimizer(
    config: OptimizerConfig, initial: torch.Tensor, *, device: str | torch.device = "cpu"
) -> ServerOptimizer:
    """The optimizer `config` names, over a copy of `initial`."""
    if config.kind is OptimizerKind.SGD:
        return FlatSGD(initial, weight_decay=config.weight_decay, device=device)
    return FlatAdam(
        initial,
        beta2=config.beta2,
        eps=config.eps,
        weight_decay=config.weight_decay,
        decoupled=config.kind is OptimizerKind.ADAMW,
        device=device,
    )
