import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch.core.sync.optimizer import (
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


def test_placed_buffers_hold_the_weights_and_receive_the_gradient():
    # As a worker places them in memory it shares with its servers (runtime/ray/worker.py).
    plain, placed = _model(), _model()
    flat = FlatParameters(placed)
    size = flat.values.numel()
    values, gradient = torch.full((size,), 9.0), torch.full((size,), 9.0)
    flat.place(values, gradient)
    assert torch.equal(values, flatten_parameters(plain))  # the weights came along
    flat.zero_grad()
    _loss(placed).backward()
    plain.zero_grad(set_to_none=True)
    _loss(plain).backward()
    assert torch.equal(gradient, flat_gradient(plain))  # backward wrote into the buffer
    values.mul_(0.5)  # a reply written where the model computes: no load needed
    flat.load(values.numpy())
    assert torch.equal(flatten_parameters(placed), flatten_parameters(plain) * 0.5)


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


# (lr, momentum) per step: momentum changes at "switches" and drops to 0 for whole phases (an
# ASP phase with --momentum-at-switch zero), during which torch keeps the old buffer untouched.
_SCHEDULE = [(0.1, 0.9)] * 3 + [(0.05, 0.0)] * 2 + [(0.02, 0.1125)] * 3 + [(0.3, 0.9)] * 2
# A first phase without momentum: the buffer must start at the first step that has some.
_SCHEDULE_LATE_MOMENTUM = [(0.1, 0.0)] * 2 + [(0.1, 0.9)] * 3 + [(0.07, 0.0), (0.07, 0.5)]


@pytest.mark.parametrize("schedule", [_SCHEDULE, _SCHEDULE_LATE_MOMENTUM])
@pytest.mark.parametrize("weight_decay", [0.0, 5e-4])
@pytest.mark.parametrize("nesterov", [False, True])
def test_flat_sgd_is_torch_sgd_bit_for_bit(schedule, weight_decay, nesterov):
    # Oracle: torch.optim.SGD on one Parameter, stepped with the same gradients, lr and
    # momentum; a state_dict round trip half way, as a checkpoint and resume would do.
    rng = np.random.default_rng(7)
    initial = torch.from_numpy(rng.standard_normal(1000).astype(np.float32))
    gradients = [torch.from_numpy(rng.standard_normal(1000).astype(np.float32)) for _ in schedule]
    param = torch.nn.Parameter(initial.clone())
    reference = torch.optim.SGD(
        [param], lr=0.1, momentum=0.9, weight_decay=weight_decay, nesterov=nesterov
    )
    ours = FlatSGD(initial, weight_decay=weight_decay, nesterov=nesterov)
    for i, ((lr, momentum), gradient) in enumerate(zip(schedule, gradients, strict=True)):
        reference.param_groups[0].update(lr=lr, momentum=momentum)
        param.grad = gradient.clone()
        reference.step()
        sent = gradient.clone()
        ours.step(sent, lr=lr, momentum=momentum)
        assert torch.equal(sent, gradient), "the caller's gradient must not be written"
        assert torch.equal(ours.weights, param.detach()), f"weights differ after step {i}"
        buffer = reference.state.get(param, {}).get("momentum_buffer")
        state = ours.state_dict()
        if buffer is None:
            assert state["momentum_buffer"] is None
        else:
            assert torch.equal(state["momentum_buffer"], buffer)
        if i == len(schedule) // 2:
            ours = FlatSGD(torch.zeros(1000), weight_decay=weight_decay, nesterov=nesterov)
            ours.load_state_dict(state)


def test_flat_sgd_loads_a_checkpoint_written_by_the_torch_optim_version():
    # What FlatSGD.state_dict() wrote when it wrapped torch.optim.SGD: the same two keys.
    param = torch.nn.Parameter(torch.linspace(-1, 1, 6))
    reference = torch.optim.SGD([param], lr=0.1, momentum=0.9, weight_decay=1e-3)
    param.grad = torch.linspace(0, 1, 6)
    reference.step()
    old = {
        "weights": param.detach().clone(),
        "momentum_buffer": reference.state[param]["momentum_buffer"].clone(),
    }
    ours = FlatSGD(torch.zeros(6), weight_decay=1e-3)
    ours.load_state_dict(old)
    param.grad = torch.linspace(1, 0, 6)
    reference.step()
    ours.step(torch.linspace(1, 0, 6), lr=0.1, momentum=0.9)
    assert torch.equal(ours.weights, param.detach())


def test_flat_sgd_converts_a_gradient_of_another_dtype_like_torch():
    param = torch.nn.Parameter(torch.ones(5))
    reference = torch.optim.SGD([param], lr=0.1, momentum=0.9)
    gradient = torch.linspace(0, 1, 5, dtype=torch.float64)
    param.grad = gradient.to(torch.float32)
    reference.step()
    ours = FlatSGD(torch.ones(5))
    ours.step(gradient, lr=0.1, momentum=0.9)
    assert torch.equal(ours.weights, param.detach())
    with pytest.raises(ValueError, match="shape"):
        ours.step(torch.ones(4), lr=0.1, momentum=0.9)
