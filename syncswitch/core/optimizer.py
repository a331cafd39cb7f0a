"""The parameter update: one flat parameter vector stepped by PyTorch's own SGD.

Parameters live as a single flat buffer so that one message per update carries the whole model
(one message per tensor would make the data path, not the math, set the speed on small models).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class FlatSGD:
    """SGD with momentum and weight decay over a flat parameter vector.

    Learning rate and momentum are set per update because the configuration policy changes them
    with the protocol; the momentum buffer carries over across protocol switches.
    """

    def __init__(
        self,
        initial: torch.Tensor,
        *,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        device: str | torch.device = "cpu",
    ):
        self._param = torch.nn.Parameter(
            initial.detach().to(device=device, dtype=torch.float32).clone()
        )
        # momentum > 0 at construction so that torch keeps a momentum buffer from the first step.
        self._optimizer = torch.optim.SGD(
            [self._param], lr=0.1, momentum=0.9, weight_decay=weight_decay, nesterov=nesterov
        )

    @property
    def weights(self) -> torch.Tensor:
        """The weights where they live (on the optimizer's device)."""
        return self._param.data

    def weights_on_cpu(self) -> torch.Tensor:
        """The weights in CPU memory: the tensor itself on a CPU, a copy from a GPU."""
        return self._param.data.cpu()

    def step(self, gradient: torch.Tensor, *, lr: float, momentum: float) -> None:
        group = self._optimizer.param_groups[0]
        group["lr"] = lr
        group["momentum"] = momentum
        # Gradients arrive in CPU memory; on a GPU the aggregate crosses over once per update.
        self._param.grad = gradient.to(device=self._param.device, dtype=torch.float32)
        self._optimizer.step()
        self._param.grad = None

    def state_dict(self) -> dict:
        """Weights and momentum buffer as plain tensors (a checkpoint holds nothing else)."""
        buffer = self._optimizer.state.get(self._param, {}).get("momentum_buffer")
        # In CPU memory whatever the device: a checkpoint must load on a machine without it.
        return {
            "weights": self._param.data.to("cpu", copy=True),
            "momentum_buffer": None if buffer is None else buffer.to("cpu", copy=True),
        }

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self._param.copy_(state["weights"])
        buffer = state["momentum_buffer"]
        if buffer is None:
            self._optimizer.state.pop(self._param, None)
        else:
            moved = buffer.to(device=self._param.device, copy=True)
            self._optimizer.state[self._param] = {"momentum_buffer": moved}


def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    return parameters_to_vector(model.parameters()).detach()


def load_flat_parameters(model: torch.nn.Module, flat: torch.Tensor) -> None:
    with torch.no_grad():
        vector_to_parameters(flat, model.parameters())


def flat_gradient(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


class FlatParameters:
    """A model whose parameters and gradients are views into two flat buffers.

    A worker loads new weights and reads its gradient once per step; with views that is one
    copy each way instead of one per tensor (on the small MNIST-1D model the per-tensor
    version costs more than the Ray call that moves the buffer).

    On a GPU (`staged`) each crossing goes through a host buffer allocated once (pinned, so
    the copy is a single DMA transfer): weights come in as one copy host->device, the
    gradient leaves as one copy device->host. On the CPU the buffers are used directly.
    """

    def __init__(self, model: torch.nn.Module, *, staged: bool | None = None) -> None:
        params = list(model.parameters())
        self.values = parameters_to_vector(params).detach().clone()
        self.gradient = torch.zeros_like(self.values)
        offset = 0
        for p in params:
            n = p.numel()
            p.data = self.values[offset : offset + n].view_as(p)
            # A defined .grad is accumulated into in place by autograd, so backward writes
            # straight into the flat gradient buffer.
            p.grad = self.gradient[offset : offset + n].view_as(p)
            offset += n
        self.device = self.values.device
        self.staged = self.device.type != "cpu" if staged is None else staged
        if self.staged:
            pin = self.device.type == "cuda"
            self._host_in = torch.empty(self.values.shape, pin_memory=pin)
            self._host_out = torch.empty(self.values.shape, pin_memory=pin)
            self._values_np = self._host_in.numpy()
        else:
            self._values_np = self.values.numpy()

    def load(self, weights: np.ndarray) -> None:
        """Copy new weights in (the source may be a read-only array from Ray)."""
        np.copyto(self._values_np, weights)
        if self.staged:
            # Ordered before the next forward on the same stream; the host buffer is not
            # written again before gradient_to_host() has waited for the stream.
            self.values.copy_(self._host_in, non_blocking=True)

    def gradient_to_host(self) -> np.ndarray:
        """The flat gradient in host memory, valid until the next call (it is reused)."""
        if not self.staged:
            return self.gradient.numpy()
        self._host_out.copy_(self.gradient, non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return self._host_out.numpy()

    def zero_grad(self) -> None:
        self.gradient.zero_()
