"""Adam and AdamW on the parameter server, end to end on the simulator, against plain
torch.optim loops: one worker is sequential Adam; BSP over n workers is Adam on the n-fold
batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch.config import TrainConfig
from syncswitch.core.sync.local import InnerLoop, LocalRound
from syncswitch.core.sync.optimizer import flatten_parameters
from syncswitch.core.sync.server_optimizer import OptimizerConfig, OptimizerKind, make_optimizer
from syncswitch.core.sync.sharding import BatchStream, worker_shard
from syncswitch.runtime.train import train
from syncswitch.workloads import build_model, prepare_batch
from tests.sim.interrupt import InterruptAfter

JOB = dict(
    batch_size=16,
    lr=3e-3,
    lr_schedule="constant",
    eval_every=0.25,
    progress=False,
    mnist1d_samples=2000,
    runtime="sim",
    epochs=1.0,
    seed=2,
    betas=[0.85, 0.99],
    weight_decay=0.01,
)
TORCH = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def _torch_loop(mnist, optimizer: str, workers: int, updates: int) -> np.ndarray:
    """The same job as one model and torch's optimizer: each step's batch is every worker's
    batch of that round, concatenated (the loss is a mean, so its gradient is their mean)."""
    torch.manual_seed(2)
    model = build_model("cnn1d", mnist)
    reference = TORCH[optimizer](model.parameters(), lr=3e-3, betas=(0.85, 0.99), weight_decay=0.01)
    samples = len(mnist.y_train)
    streams = [BatchStream(worker_shard(samples, w, workers, 2), 16, 2, w) for w in range(workers)]
    for _ in range(updates):
        indices = np.concatenate([s.next_indices() for s in streams])
        x, y = prepare_batch(mnist, mnist.x_train[indices], mnist.y_train[indices], train=True)
        reference.zero_grad()
        F.cross_entropy(model(x), y).backward()
        reference.step()
    return flatten_parameters(model).numpy()


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_one_worker_is_a_plain_torch_adam_loop(mnist, tmp_path, optimizer) -> None:
    # Two server shards: each steps its slice, together exactly the whole vector's step.
    config = TrainConfig(
        **JOB, optimizer=optimizer, workers=1, servers=2, schedule="asp", out=str(tmp_path)
    )
    result = train(config, dataset=mnist)
    updates = result.summary["updates"]
    assert updates == 1600 // 16
    expected = _torch_loop(mnist, optimizer, 1, updates)
    np.testing.assert_allclose(result.final_weights, expected, rtol=1e-6, atol=1e-6)


def test_bsp_over_four_workers_is_adamw_on_the_fourfold_batch(mnist, tmp_path) -> None:
    config = TrainConfig(**JOB, optimizer="adamw", workers=4, schedule="bsp", out=str(tmp_path))
    result = train(config, dataset=mnist)
    updates = result.summary["updates"]
    assert updates == 1600 // 64
    expected = _torch_loop(mnist, "adamw", 4, updates)
    # The mean of four gradients is summed in another order than one batch's: not bit for bit.
    np.testing.assert_allclose(result.final_weights, expected, rtol=1e-5, atol=1e-6)


def test_a_resumed_adamw_run_is_the_uninterrupted_one(mnist, tmp_path) -> None:
    # The moments and counters travel in the checkpoint. (Under BSP: after an ASP or local
    # phase a resumed run is not bit for bit the uninterrupted one, with SGD either, since
    # the gradients in flight at the checkpoint are not in it.)
    job = {
        **JOB,
        "optimizer": "adamw",
        "workers": 4,
        "schedule": "bsp",
        "epochs": 3.0,
        "checkpoint_every": 0.1,
    }
    whole = train(TrainConfig(**job, out=str(tmp_path / "whole")), dataset=mnist)
    cut = TrainConfig(**job, out=str(tmp_path / "cut"))
    with pytest.raises(KeyboardInterrupt):
        train(cut, dataset=mnist, loss_fn=InterruptAfter(220))
    resumed = train(cut, dataset=mnist, resume=True)
    assert resumed.summary["reliability"]["failures"][-1]["kind"] == "resumed"
    for key in ("validation", "test", "final_value"):
        assert resumed.summary[key] == whole.summary[key]
    np.testing.assert_array_equal(resumed.final_weights, whole.final_weights)


def test_a_local_round_with_adam_takes_adam_steps() -> None:
    # The worker's own optimizer in a local phase is the server's kind: its H steps are
    # FlatAdam's, from the pulled weights.
    config = OptimizerConfig(OptimizerKind.ADAM, eps=1e-6)
    inner = InnerLoop(config)
    target = torch.tensor([1.0, -2.0, 0.5])

    def gradient(weights: np.ndarray) -> tuple[np.ndarray, float]:
        w = torch.from_numpy(weights)
        return (w - target).numpy().copy(), float(((w - target) ** 2).sum())

    plan = LocalRound(
        steps=3, lr=0.1, momentum=0.8, weight_decay=0.0, epoch=0, keep_inner_state=False
    )
    pulled = np.zeros(3, np.float32)
    delta, _ = inner.run(pulled, plan, gradient)
    by_hand = make_optimizer(config, torch.zeros(3))
    for _ in range(3):
        by_hand.step(by_hand.weights - target, lr=0.1, momentum=0.8)
    np.testing.assert_array_equal(delta, (torch.zeros(3) - by_hand.weights).numpy())


def test_asynchronous_updates_take_bsp_lr_with_adam_and_its_share_with_sgd() -> None:
    from syncswitch.config.components import async_lr_policy
    from syncswitch.core.sync.hyperparams import AsyncLrPolicy

    assert async_lr_policy(TrainConfig()) is AsyncLrPolicy.LINEAR
    assert async_lr_policy(TrainConfig(optimizer="adamw")) is AsyncLrPolicy.NONE
    assert async_lr_policy(TrainConfig(optimizer="adam", async_lr="linear")) is (
        AsyncLrPolicy.LINEAR
    )
    assert async_lr_policy(TrainConfig(async_lr="none")) is AsyncLrPolicy.NONE


def test_at_a_switch_adam_keeps_beta1_and_sgd_scales_its_momentum() -> None:
    from syncswitch.config.components import momentum_policy
    from syncswitch.core.sync.hyperparams import MomentumPolicy
    from syncswitch.registry.fingerprint import describe_job

    assert momentum_policy(TrainConfig()) is MomentumPolicy.SCALE
    assert momentum_policy(TrainConfig(optimizer="adamw")) is MomentumPolicy.KEEP
    named = TrainConfig(optimizer="adam", momentum_at_switch="reset")
    assert momentum_policy(named) is MomentumPolicy.RESET
    # A job stored before the default depended on the optimizer named "scale".
    assert describe_job(TrainConfig())["momentum_at_switch"] == "scale"
    assert describe_job(TrainConfig(momentum_at_switch="scale")) == describe_job(TrainConfig())
