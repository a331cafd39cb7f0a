import numpy as np
import torch
import torch.nn.functional as F

from syncswitch.core.optimizer import (
    FlatParameters,
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
