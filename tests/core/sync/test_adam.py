"""FlatAdam against torch.optim.Adam / AdamW: the same weights, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syncswitch.core.sync.adam import FlatAdam
from syncswitch.core.sync.server_optimizer import OptimizerConfig, OptimizerKind, make_optimizer

# (lr, beta1) per step: the learning rate follows a schedule; beta1 stays, as in torch.
_STEPS = [(3e-3, 0.9)] * 4 + [(1e-3, 0.9)] * 3 + [(5e-4, 0.9)] * 3


def _problem(n: int = 1000, steps: int = len(_STEPS), seed: int = 3):
    rng = np.random.default_rng(seed)
    initial = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    gradients = [torch.from_numpy(rng.standard_normal(n).astype(np.float32)) for _ in range(steps)]
    return initial, gradients


@pytest.mark.parametrize("kind", [OptimizerKind.ADAM, OptimizerKind.ADAMW])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_flat_adam_is_torch_adam_bit_for_bit(kind, weight_decay):
    # Oracle: torch's optimizer on one Parameter with the same gradients and learning rates; a
    # state_dict round trip half way, as a checkpoint and resume would do.
    initial, gradients = _problem()
    param = torch.nn.Parameter(initial.clone())
    torch_class = torch.optim.AdamW if kind is OptimizerKind.ADAMW else torch.optim.Adam
    reference = torch_class(
        [param], lr=1e-3, betas=(0.9, 0.98), eps=1e-7, weight_decay=weight_decay
    )
    config = OptimizerConfig(kind, weight_decay=weight_decay, beta2=0.98, eps=1e-7)
    ours = make_optimizer(config, initial)
    for i, ((lr, beta1), gradient) in enumerate(zip(_STEPS, gradients, strict=True)):
        reference.param_groups[0]["lr"] = lr
        param.grad = gradient.clone()
        reference.step()
        sent = gradient.clone()
        ours.step(sent, lr=lr, momentum=beta1)
        assert torch.equal(sent, gradient), "the caller's gradient must not be written"
        assert torch.equal(ours.weights, param.detach()), f"weights differ after step {i}"
        state = ours.state_dict()
        assert torch.equal(state["momentum_buffer"], reference.state[param]["exp_avg"])
        assert torch.equal(state["second_moment"], reference.state[param]["exp_avg_sq"])
        if i == len(_STEPS) // 2:
            ours = make_optimizer(config, torch.zeros(1000))
            ours.load_state_dict(state)


def test_a_changed_beta1_is_bias_corrected_by_the_product_of_its_values():
    # Hand-computed: with beta1 0.9 then 0.5, the first moment's bias correction is
    # 1 - 0.9 * 0.5 after two steps (not 1 - 0.5 ** 2).
    ours = FlatAdam(torch.zeros(1), beta2=0.0, eps=0.0)
    ours.step(torch.tensor([2.0]), lr=1.0, momentum=0.9)  # m = 0.2, v = 4: step -0.2/0.1/2
    assert ours.weights.item() == pytest.approx(-1.0)
    ours.step(torch.tensor([4.0]), lr=1.0, momentum=0.5)  # m = 0.1 + 2 = 2.1, v = 16
    expected = -1.0 - (2.1 / (1 - 0.9 * 0.5)) / 4.0
    assert ours.weights.item() == pytest.approx(expected, rel=1e-6)


def test_reset_momentum_restarts_the_first_moment_and_keeps_the_second():
    ours = FlatAdam(torch.zeros(3))
    for g in ([1.0, -2.0, 3.0], [0.5, 0.5, -1.0]):
        ours.step(torch.tensor(g), lr=0.1, momentum=0.9)
    second = ours.state_dict()["second_moment"]
    ours.reset_momentum()
    before = ours.weights.clone()
    gradient = torch.tensor([1.0, 1.0, 1.0])
    ours.step(gradient, lr=0.1, momentum=0.9)
    state = ours.state_dict()
    # A fresh first moment, bias-corrected as new: m_hat is the gradient itself.
    assert torch.allclose(state["momentum_buffer"], 0.1 * gradient)
    assert state["steps"] == 3, "the second moment's count carries on"
    v = 0.999 * second + 0.001 * gradient**2
    assert torch.allclose(state["second_moment"], v)
    v_hat = v / (1 - 0.999**3)
    assert torch.allclose(ours.weights, before - 0.1 * gradient / (v_hat.sqrt() + 1e-8))


def test_a_snapshot_is_not_changed_by_later_steps():
    # A rollback reloads the same snapshot more than once: loading must copy.
    ours = FlatAdam(torch.zeros(4))
    ours.step(torch.ones(4), lr=0.1, momentum=0.9)
    state = ours.state_dict()
    kept = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
    ours.load_state_dict(state)
    ours.step(torch.ones(4), lr=0.1, momentum=0.9)
    for key, value in kept.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(state[key], value), key
