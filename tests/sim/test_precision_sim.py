"""`--precision bf16-mixed` where gradients are computed: the forward pass runs in bfloat16
while the gradient (what the servers receive) stays float32; a simulated worker computes its
Ray twin's gradient under it too; a short simulated run trains, records its precision, and a
resumed run keeps it."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from syncswitch.cli.train import add_parser, config_for_resume
from syncswitch.core.sync.optimizer import FlatParameters, flatten_parameters
from syncswitch.core.sync.precision import Precision
from syncswitch.errors import ConfigError
from syncswitch.runtime.gradient import backward_on_batch
from syncswitch.workloads.data import ArrayData
from tests.sim.test_gradients import make_computer, ray_twin
from tests.sim.test_sim_runtime import accounted, simulate

from .models import NoisyNetFactory


def _gradient(mnist, precision: Precision) -> tuple[np.ndarray, list[torch.dtype], nn.Module]:
    """One batch's gradient under `precision`, the dtypes the hidden layer produced, the model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(40, 32), nn.ReLU(), nn.Linear(32, 10))
    seen: list[torch.dtype] = []
    model[1].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    flat = FlatParameters(model)
    generator = torch.Generator().manual_seed(0)
    data = ArrayData(mnist)
    backward_on_batch(model, flat, data, np.arange(32), F.cross_entropy, generator, precision)
    assert flat.gradient.dtype is torch.float32  # the buffer a worker sends from
    return flat.gradient.numpy().copy(), seen, model


def test_bf16_mixed_runs_the_forward_in_bfloat16_and_keeps_float32_gradients(mnist):
    exact, exact_dtypes, _ = _gradient(mnist, Precision.FLOAT32)
    mixed, mixed_dtypes, model = _gradient(mnist, Precision.BF16_MIXED)
    assert exact_dtypes == [torch.float32]
    assert mixed_dtypes == [torch.bfloat16]  # the hidden activation, as autocast made it
    assert mixed.dtype == np.float32
    assert all(
        p.dtype is torch.float32 and p.grad.dtype is torch.float32 for p in model.parameters()
    )
    # Rounded on the way, so not float32's gradient, but near it (bfloat16 keeps 8 bits).
    assert not np.array_equal(mixed, exact)
    assert np.linalg.norm(mixed - exact) <= 0.05 * np.linalg.norm(exact)


def test_a_simulated_worker_computes_its_ray_twins_bf16_mixed_gradient(mnist):
    threads = torch.get_num_threads()
    twin = ray_twin(mnist, 1, 0, precision=Precision.BF16_MIXED)
    twin_rng = torch.get_rng_state()
    computer = make_computer(mnist, precision=Precision.BF16_MIXED)
    computer.position(1, 0, new_process=True)
    torch.set_num_threads(threads)
    weights = flatten_parameters(NoisyNetFactory()()).numpy()
    plain = make_computer(mnist)
    plain.position(1, 0, new_process=True)
    for _ in range(2):
        mine, my_loss = computer.gradient(1, weights)
        torch.set_rng_state(twin_rng)
        theirs, their_loss = twin._gradient(weights)
        twin_rng = torch.get_rng_state()
        np.testing.assert_array_equal(mine, theirs)
        assert my_loss == their_loss
        exact, _ = plain.gradient(1, weights)
        assert not np.array_equal(mine, exact)  # it did compute in bfloat16
        weights = weights - 0.1 * mine


def test_a_short_bf16_mixed_run_trains_as_float32_does_and_says_so(mnist, tmp_path):
    job = dict(workers=2, schedule="bsp:0.5,asp", epochs=1.0, seed=1)
    full = simulate(tmp_path, mnist, "float32", **job)
    mixed = simulate(tmp_path, mnist, "mixed", precision="bf16-mixed", **job)
    assert full.summary.precision == "32" and mixed.summary.precision == "bf16-mixed"
    saved = json.loads((tmp_path / "mixed" / "config.json").read_text())
    assert saved["precision"] == "bf16-mixed"
    assert mixed.final_weights.dtype == np.float32  # the servers' master weights
    # Not the same run (the forward rounds), but one that learns as float32's does.
    assert mixed.summary.test != full.summary.test
    assert mixed.summary.test["accuracy"] == pytest.approx(full.summary.test["accuracy"], abs=0.06)
    assert mixed.summary.test["loss"] == pytest.approx(full.summary.test["loss"], abs=0.05)
    # One epoch on 1,600 samples: below an untrained model's ln 10 = 2.3 nats, above chance.
    assert mixed.summary.test["loss"] < 2.1 and mixed.summary.test["accuracy"] > 0.2
    accounted(mixed.summary.to_plain())
    # A resumed run is the job it began as: another precision beside --resume is refused.
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    resume = ["train", "--resume", str(tmp_path / "mixed")]
    with pytest.raises(ConfigError, match="drop --precision"):
        config_for_resume(parser.parse_args([*resume, "--precision", "32"]))
