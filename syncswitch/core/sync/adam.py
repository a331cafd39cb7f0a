"""Adam and AdamW on the parameter server's flat parameter vector.

The arithmetic is `torch.optim.Adam`'s single-tensor path (`_single_tensor_adam`, not
amsgrad, not maximising), op for op, so one worker's run equals a plain `torch.optim.Adam`
or `AdamW` loop bit for bit (tests/core/sync/test_adam.py). It is written out for the reason
FlatSGD is: per-call Python in `torch.optim` costs more than the arithmetic on small models.

Two things torch's optimizer has no use for, because its beta1 never changes:

- **beta1 per step.** A switch policy may change it (`--momentum-at-switch scale` divides it
  by the workers, `ramp` brings it back), exactly as it changes SGD's momentum; the step's
  `momentum` argument is the beta1 of that step. The first moment's bias correction is then
  1 - (product of the beta1s since the moment started), kept as the product up to the last
  change times beta1 ** (steps since): with beta1 never changed that is torch's
  1 - beta1 ** step, to the bit.
- **A first moment reset on its own** (`reset_momentum`, `--momentum-at-switch reset`): the
  moment and its bias correction restart; the second moment and its step count carry on, so
  the step size stays normalised by what the run has learnt of each coordinate's scale.
"""

from __future__ import annotations

from typing import Any

import torch

from syncswitch.core.sync.optimizer import adopted, as_float32_on, check_shape


class FlatAdam:
    """Adam (L2 weight decay added to the gradient) or, with `decoupled`, AdamW (weights
    shrunk by lr * weight_decay before the step) over one flat vector."""

    def __init__(
        self,
        initial: torch.Tensor,
        *,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled: bool = False,
        device: str | torch.device = "cpu",
    ) -> None:
        self._weights = initial.detach().to(device=device, dtype=torch.float32).clone()
        self._beta2 = float(beta2)
        self._eps = float(eps)
        self._weight_decay = float(weight_decay)
        self._decoupled = decoupled
        self._first: torch.Tensor | None = None  # exp_avg; None before the first step
        self._second: torch.Tensor | None = None  # exp_avg_sq
        self._steps = 0  # updates the second moment has seen (torch's `step`)
        # The first moment's decay so far: product before the last change of beta1, that
        # beta1, and the steps taken with it (see the module docstring).
        self._decay_before = 1.0
        self._beta1_run = 0.0
        self._run_steps = 0
        self._scratch: torch.Tensor | None = None  # the decayed gradient (Adam, decay on)
        self._denom: torch.Tensor | None = None
        self._incoming: torch.Tensor | None = None

    @property
    def weights(self) -> torch.Tensor:
        return self._weights

    @property
    def weight_decay(self) -> float:
        return self._weight_decay

    def weights_on_cpu(self) -> torch.Tensor:
        return self._weights.cpu()

    def adopt(self, buffer: torch.Tensor) -> None:
        self._weights = adopted(self._weights, buffer)

    def reset_momentum(self) -> None:
        """Forget the first moment: the next step starts it afresh, bias-corrected as new."""
        self._first = None
        self._decay_before, self._beta1_run, self._run_steps = 1.0, 0.0, 0

    def step(self, gradient: torch.Tensor, *, lr: float, momentum: float) -> None:
        """One Adam(W) update with `gradient` (read, never written); `momentum` is beta1."""
        weights = self._weights
        check_shape(gradient, weights)
        grad, self._incoming = as_float32_on(gradient, weights, self._incoming)
        beta1 = float(momentum)
        if self._first is None:
            self._first = torch.zeros_like(weights)
            self._second = torch.zeros_like(weights) if self._second is None else self._second
            self._denom = torch.empty_like(weights)
        first, second, denom = self._first, self._second, self._denom
        assert second is not None and denom is not None  # made with the first moment
        self._steps += 1
        if beta1 != self._beta1_run:
            self._decay_before *= self._beta1_run**self._run_steps
            self._beta1_run, self._run_steps = beta1, 0
        self._run_steps += 1
        if self._weight_decay != 0:
            if self._decoupled:
                weights.mul_(1 - lr * self._weight_decay)
            else:
                if self._scratch is None:
                    self._scratch = torch.empty_like(weights)
                grad = torch.add(grad, weights, alpha=self._weight_decay, out=self._scratch)
        first.lerp_(grad, 1 - beta1)
        second.mul_(self._beta2).addcmul_(grad, grad, value=1 - self._beta2)
        bias_correction1 = 1 - self._decay_before * beta1**self._run_steps
        bias_correction2 = 1 - self._beta2**self._steps
        step_size = lr / bias_correction1
        torch.sqrt(second, out=denom).div_(bias_correction2**0.5).add_(self._eps)
        weights.addcdiv_(first, denom, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        """Weights, both moments and the counters, in CPU memory (a checkpoint's part)."""

        def cpu(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to("cpu", copy=True)

        return {
            "weights": self._weights.to("cpu", copy=True),
            "momentum_buffer": cpu(self._first),
            "second_moment": cpu(self._second),
            "steps": self._steps,
            "first_decay": self._decay_before,
            "first_beta": self._beta1_run,
            "first_steps": self._run_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        weights = self._weights
        weights.copy_(state["weights"])

        def here(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(weights.device, torch.float32, copy=True)

        self._first = here(state.get("momentum_buffer"))
        self._second = here(state.get("second_moment"))
        if self._first is not None and self._second is None:
            self._second = torch.zeros_like(weights)  # an SGD momentum taken over as m
        self._denom = None if self._first is None else torch.empty_like(weights)
        self._steps = int(state.get("steps", 0))
        self._decay_before = float(state.get("first_decay", 1.0))
        self._beta1_run = float(state.get("first_beta", 0.0))
        self._run_steps = int(state.get("first_steps", 0))
