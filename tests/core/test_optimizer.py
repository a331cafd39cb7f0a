import copy

import numpy as np
import torch
import torch.nn.functional as F

from syncswitch.core.optimizer import (
    FlatParameters,
    FlatSGD,
    flat_gradient,
    flatten_parameters,
    load_flat_parameters,
)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def _loss(model: torch.nn.Module) -> torch.Tensor:
    x = torch.linspace(-1, 1, 24).reshape(4, 6)
    return F.cross_entropy(model(x), torch.tensor([0, 1, 2, 1]))


def test_flat_views_give_the_same_gradient_as_the_plain_model():
    plain, viewed = _model(), _model()
    flat = FlatParameters(viewed)
    weights = np.random.default_rng(1).standard_normal(flat.values.numel()).astype(np.float32)
    weights.setflags(write=False)  # as Ray delivers them
    load_flat_parameters(plain, torch.tensor(weights))
    flat.load(weights)
    for _ in range(2):  # the second step checks the buffer is zeroed, not accumulated
        plain.zero_grad(set_to_none=True)
        _loss(plain).backward()
        flat.zero_grad()
        _loss(viewed).backward()
        assert torch.equal(flat.gradient, flat_gradient(plain))
    assert torch.equal(flatten_parameters(viewed), torch.tensor(weights))


def test_loading_weights_changes_the_model_in_place():
    model = _model()
    flat = FlatParameters(model)
    flat.load(np.zeros(flat.values.numel(), np.float32))
    assert all(torch.count_nonzero(p) == 0 for p in model.parameters())


def _gradient_step(flat: FlatParameters, model: torch.nn.Module, weights: np.ndarray) -> np.ndarray:
    flat.load(weights)
    flat.zero_grad()
    x = torch.linspace(-1, 1, 24).reshape(4, 6)
    model(x).pow(2).sum().backward()
    return flat.gradient_to_host().copy()


def test_staged_flat_parameters_move_the_same_weights_and_gradients_as_direct_ones():
    # Staging is the GPU path (one copy each way through a reusable host buffer); on the CPU
    # it can be forced, so its bookkeeping is tested here without a GPU.
    torch.manual_seed(0)
    direct_model = torch.nn.Sequential(
        torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)
    )
    staged_model = copy.deepcopy(direct_model)
    direct, staged = FlatParameters(direct_model), FlatParameters(staged_model, staged=True)
    assert not direct.staged and staged.staged
    rng = np.random.default_rng(0)
    for _ in range(3):
        weights = rng.standard_normal(direct.values.numel()).astype(np.float32)
        expected = _gradient_step(direct, direct_model, weights)
        got = _gradient_step(staged, staged_model, weights)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(staged.values.numpy(), weights)
    # The host buffers are allocated once and reused, step after step.
    assert staged.gradient_to_host().ctypes.data == staged.gradient_to_host().ctypes.data


def test_flat_sgd_state_is_in_cpu_memory_and_loads_back():
    sgd = FlatSGD(torch.ones(4), device="cpu")
    sgd.step(torch.full((4,), 0.5), lr=0.1, momentum=0.9)
    state = sgd.state_dict()
    assert state["weights"].device.type == "cpu"
    assert state["momentum_buffer"].device.type == "cpu"
    assert state["weights"].data_ptr() != sgd.weights.data_ptr()  # a copy, not a view
    again = FlatSGD(torch.zeros(4))
    again.load_state_dict(state)
    torch.testing.assert_close(again.weights, sgd.weights)
    torch.testing.assert_close(again.weights_on_cpu(), sgd.weights)
