"""The parameter update: one flat parameter vector stepped by SGD with momentum.

Parameters live as a single flat buffer so that one message per update carries the whole model
(one message per tensor would make the data path, not the math, set the speed on small models).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class FlatSGD:
    """SGD with momentum and weight decay over a flat parameter vector.

    Learning rate and momentum are set per update because the configuration policy changes them
    with the protocol; the momentum buffer carries over across protocol switches.

    The arithmetic is `torch.optim.SGD`'s (`_single_tensor_sgd`, dampening 0, not maximising),
    op for op, so the weights are bit-for-bit those torch's optimizer would give
    (tests/core/sync/test_optimizer.py checks it). It is written out because on a small model
    `torch.optim.SGD.step()` spends most of its time in per-call Python (the profile hook
    wrapper, `record_function`, choosing foreach/fused), not in the arithmetic: ~18 us of CPU
    per step against ~7 us written out, on 5,210 floats (benchmarks/server_apply.py).

    No per-step allocation after the first momentum step: the decayed (or Nesterov) gradient
    goes to a scratch buffer allocated once, never into the caller's tensor, which may be a
    view of a buffer the caller still reads (the simulator slices one worker gradient per
    shard).
    """

    def __init__(
        self,
        initial: torch.Tensor,
        *,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        device: str | torch.device = "cpu",
    ):
        # A plain tensor, not a Parameter: it never requires grad, so the in-place updates
        # below are never recorded by autograd and need no torch.no_grad() (~1 us a step).
        self._weights = initial.detach().to(device=device, dtype=torch.float32).clone()
        self._weight_decay = float(weight_decay)
        self._nesterov = nesterov
        self._momentum_buffer: torch.Tensor | None = None
        # Where the decayed and the Nesterov gradient are formed; only needed when either is.
        self._scratch: torch.Tensor | None = (
            torch.empty_like(self._weights) if self._weight_decay != 0 or nesterov else None
        )
        # A gradient of another dtype or device is converted into this buffer (made on first
        # use): on a GPU the aggregate crosses over once per update, into memory reused.
        self._incoming: torch.Tensor | None = None

    @property
    def weights(self) -> torch.Tensor:
        """The weights where they live (on the optimizer's device)."""
        return self._weights

    @property
    def weight_decay(self) -> float:
        return self._weight_decay

    def reset_momentum(self) -> None:
        """Forget the momentum buffer: the next step with momentum starts it afresh."""
        self._momentum_buffer = None

    def weights_on_cpu(self) -> torch.Tensor:
        """The weights in CPU memory: the tensor itself on a CPU, a copy from a GPU."""
        return self._weights.cpu()

    def adopt(self, buffer: torch.Tensor) -> None:
        """Step `buffer` in place from now on, holding the current weights (see adopted())."""
        self._weights = adopted(self._weights, buffer)

    def step(self, gradient: torch.Tensor, *, lr: float, momentum: float) -> None:
        """One SGD update with `gradient`, which is read and never written."""
        weights = self._weights
        check_shape(gradient, weights)
        grad, self._incoming = as_float32_on(gradient, weights, self._incoming)
        # torch.optim.SGD: grad = grad + weight_decay * param, as a new tensor.
        if self._weight_decay != 0:
            grad = torch.add(grad, weights, alpha=self._weight_decay, out=self._scratch)
        # torch.optim.SGD skips the buffer entirely when momentum is 0: an existing buffer is
        # kept unchanged for a later phase with momentum, and none is created.
        if momentum != 0:
            buffer = self._momentum_buffer
            if buffer is None:
                # The first step with momentum starts the buffer at the (decayed) gradient.
                buffer = self._momentum_buffer = grad.clone()
            else:
                buffer.mul_(momentum).add_(grad)  # dampening 0: add_ with alpha 1 - 0
            if self._nesterov:
                grad = torch.add(grad, buffer, alpha=momentum, out=self._scratch)
            else:
                grad = buffer
        weights.add_(grad, alpha=-lr)

    def state_dict(self) -> dict[str, Any]:
        """Weights and momentum buffer as plain tensors (a checkpoint holds nothing else)."""
        buffer = self._momentum_buffer
        # In CPU memory whatever the device: a checkpoint must load on a machine without it.
        return {
            "weights": self._weights.to("cpu", copy=True),
            "momentum_buffer": None if buffer is None else buffer.to("cpu", copy=True),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._weights.copy_(state["weights"])
        buffer = state.get("momentum_buffer")
        self._momentum_buffer = (
            None
            if buffer is None
            else buffer.to(device=self._weights.device, dtype=torch.float32, copy=True)
        )


def adopted(weights: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """`buffer`, holding `weights`' values, for an optimizer to step in place from now on: a
    worker's local steps then update the memory its model computes in, and no step copies
    the weights into the model first."""
    where = (weights.shape, weights.dtype, weights.device)
    if (buffer.shape, buffer.dtype, buffer.device) != where:
        raise ValueError(
            f"a buffer of shape {tuple(buffer.shape)}, {buffer.dtype} on {buffer.device} for "
            f"weights of shape {tuple(weights.shape)}, {weights.dtype} on {weights.device}"
        )
    if buffer.data_ptr() != weights.data_ptr():
        buffer.copy_(weights)
    return buffer


def check_shape(gradient: torch.Tensor, weights: torch.Tensor) -> None:
    if gradient.shape != weights.shape:
        raise ValueError(
            f"gradient of shape {tuple(gradient.shape)} for weights of shape {tuple(weights.shape)}"
        )


def as_float32_on(
    gradient: torch.Tensor, weights: torch.Tensor, incoming: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`gradient` as float32 on the weights' device: itself when it already is, else copied
    into `incoming` (made on first use, returned to be kept): on a GPU the aggregate crosses
    over once per update, into memory reused."""
    if gradient.requires_grad:
        gradient = gradient.detach()  # so that out= in the step never meets autograd
    if gradient.dtype is torch.float32 and gradient.device == weights.device:
        return gradient, incoming
    if incoming is None:
        incoming = torch.empty_like(weights)
    return incoming.copy_(gradient), incoming


def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    return parameters_to_vector(model.parameters()).detach()


def load_flat_parameters(model: torch.nn.Module, flat: torch.Tensor) -> None:
    with torch.no_grad():
        vector_to_parameters(flat, model.parameters())


def flat_gradient(model: torch.nn.Module) -> torch.Tensor:
    # A parameter without a gradient is a bug in the caller (no backward ran): fail loudly.
    grads = [p.grad for p in model.parameters()]
    if any(g is None for g in grads):
        raise RuntimeError("flat_gradient: a parameter has no gradient; run backward first")
    return torch.cat([g.reshape(-1) for g in grads if g is not None])


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
        self._params = list(model.parameters())
        values = parameters_to_vector(self._params).detach().clone()
        self._point(values, torch.zeros_like(values))
        self.device = self.values.device
        self.staged = self.device.type != "cpu" if staged is None else staged
        if self.staged:
            pin = self.device.type == "cuda"
            self._host_in = torch.empty(self.values.shape, pin_memory=pin)
            self._host_out = torch.empty(self.values.shape, pin_memory=pin)
            self._values_np = self._host_in.numpy()
        else:
            self._values_np = self.values.numpy()

    def place(self, values: torch.Tensor, gradient: torch.Tensor) -> None:
        """Move both buffers into the given CPU memory (e.g. shared with the servers, whose
        replies then land where the model computes), keeping the current weights."""
        assert not self.staged, "a staged model's buffers are on its device"
        values.copy_(self.values)
        self._point(values, gradient)
        self._values_np = values.numpy()

    def _point(self, values: torch.Tensor, gradient: torch.Tensor) -> None:
        self.values, self.gradient = values, gradient
        offset = 0
        for p in self._params:
            n = p.numel()
            p.data = values[offset : offset + n].view_as(p)
            # A defined .grad is accumulated into in place by autograd, so backward writes
            # straight into the flat gradient buffer.
            p.grad = gradient[offset : offset + n].view_as(p)
            offset += n

    def load(self, weights: np.ndarray) -> None:
        """Copy new weights in (the source may be a read-only array from Ray); nothing to
        copy when they are already there (a reply written into the placed buffer)."""
        if weights.ctypes.data == self._values_np.ctypes.data and weights.dtype == np.float32:
            return
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
