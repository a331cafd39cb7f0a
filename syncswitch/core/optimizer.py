"""The parameter update: one flat parameter vector stepped by PyTorch's own SGD.

Parameters live as a single flat buffer so that one message per update carries the whole model
(one message per tensor would make the data path, not the math, set the speed on small models).
"""

from __future__ import annotations

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class FlatSGD:
    """SGD with momentum and weight decay over a flat parameter vector.

    Learning rate and momentum are set per update because the configuration policy changes them
    with the protocol; the momentum buffer carries over across protocol switches.
    """

    def __init__(self, initial: torch.Tensor, *, weight_decay: float = 0.0, nesterov: bool = False):
        self._param = torch.nn.Parameter(initial.detach().to(torch.float32).clone())
        # momentum > 0 at construction so that torch keeps a momentum buffer from the first step.
        self._optimizer = torch.optim.SGD(
            [self._param], lr=0.1, momentum=0.9, weight_decay=weight_decay, nesterov=nesterov
        )

    @property
    def weights(self) -> torch.Tensor:
        return self._param.data

    def step(self, gradient: torch.Tensor, *, lr: float, momentum: float) -> None:
        group = self._optimizer.param_groups[0]
        group["lr"] = lr
        group["momentum"] = momentum
        self._param.grad = gradient.to(torch.float32)
        self._optimizer.step()
        self._param.grad = None

    def state_dict(self) -> dict:
        return {"weights": self._param.data.clone(), "optimizer": self._optimizer.state_dict()}


def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    return parameters_to_vector(model.parameters()).detach()


def load_flat_parameters(model: torch.nn.Module, flat: torch.Tensor) -> None:
    with torch.no_grad():
        vector_to_parameters(flat, model.parameters())


def flat_gradient(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])
