"""Local-H phases on the simulator: oracles with real gradients, traffic measured as it
arrives, a worker lost mid-round, and a resumed run's outer optimizer."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch.config import TrainConfig
from syncswitch.core.sync.optimizer import flatten_parameters
from syncswitch.core.sync.sharding import BatchStream, worker_shard
from syncswitch.rundir import load_run
from syncswitch.runtime.train import train
from syncswitch.workloads import build_model, prepare_batch
from tests.sim.interrupt import InterruptAfter

JOB = dict(
    batch_size=16,
    lr=0.1,
    momentum=0.0,
    lr_schedule="constant",
    eval_every=0.25,
    progress=False,
    mnist1d_samples=2000,
    runtime="sim",
)


def simulate(tmp_path: Path, dataset, name: str = "run", **overrides):
    values = {**JOB, "workers": 4, "out": str(tmp_path / name)}
    values.update(overrides)
    return train(TrainConfig(**values), dataset=dataset)


def accounted(summary: dict) -> None:
    counts = summary["gradients"]
    assert counts["unaccounted"] == 0
    assert counts["sent"] == counts["applied"] + sum(counts["dropped"].values())


def test_local_1_with_plain_averaging_is_bsp_on_the_simulator(mnist, tmp_path) -> None:
    job = dict(epochs=1.0, seed=1, weight_decay=1e-4)
    bsp = simulate(tmp_path, mnist, "bsp", schedule="bsp", **job)
    local = simulate(tmp_path, mnist, "local", schedule="local-1", **job)
    scale = np.abs(bsp.final_weights).max()
    assert np.abs(bsp.final_weights - local.final_weights).max() <= 1e-5 * scale
    assert bsp.summary["updates"] == local.summary["updates"] == 1600 // (4 * 16)
    assert local.summary["samples_by_protocol"] == {"local": 1600}


def sequential_sgd(mnist, steps: int, momentum: float) -> np.ndarray:
    """The job as a plain PyTorch loop: one model, torch's SGD, worker 0's data order."""
    torch.manual_seed(2)
    model = build_model("cnn1d", mnist)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    batches = BatchStream(worker_shard(len(mnist.y_train), 0, 1, 2), 16, 2, 0)
    for _ in range(steps):
        indices = batches.next_indices()
        x, y = prepare_batch(mnist, mnist.x_train[indices], mnist.y_train[indices], train=True)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return flatten_parameters(model).numpy()


def test_bsp_then_local_with_one_worker_is_sequential_sgd(mnist, tmp_path) -> None:
    """Without momentum the switch changes nothing for one worker."""
    result = simulate(tmp_path, mnist, workers=1, schedule="bsp:0.25,local-5", epochs=1.0, seed=2)
    expected = sequential_sgd(mnist, 1600 // 16, momentum=0.0)
    np.testing.assert_allclose(result.final_weights, expected, rtol=1e-4, atol=1e-5)
    assert result.summary["samples_by_protocol"] == {"bsp": 400, "local": 1200}


def test_one_worker_local_phase_from_the_start_is_sequential_sgd(mnist, tmp_path) -> None:
    result = simulate(tmp_path, mnist, workers=1, schedule="local-5", epochs=1.0, seed=2,
                      momentum=0.9)  # fmt: skip
    # Momentum too: the worker keeps its own from round to round (--local-inner-state keep).
    expected = sequential_sgd(mnist, 1600 // 16, momentum=0.9)
    np.testing.assert_allclose(result.final_weights, expected, rtol=1e-4, atol=1e-5)
    assert result.summary["updates"] == 1600 // (16 * 5)


def test_bytes_per_sample_fall_by_h_in_a_local_phase(mnist, tmp_path) -> None:
    result = simulate(tmp_path, mnist, schedule="bsp:0.25,local-8", epochs=2.0, workers=4)
    summary = result.summary
    traffic, samples = summary["traffic"], summary["samples_by_protocol"]
    per_sample = {p: traffic["bytes_by_protocol"][p] / samples[p] for p in ("bsp", "local")}
    assert per_sample["bsp"] / per_sample["local"] >= 8 / 2
    assert traffic["bytes_sent"] == sum(traffic["bytes_by_protocol"].values())
    parameters = flatten_parameters(build_model("cnn1d", mnist)).numel()
    assert traffic["bytes_by_protocol"]["bsp"] == traffic["messages_by_protocol"]["bsp"] * (
        4 * parameters
    )
    accounted(summary)
    # The run directory shows the phase like any other.
    run = load_run(result.run_dir)
    assert {s.to_protocol for s in run.summary.switches} == {"local-8"}
    assert "local-8" in run.summary.time_by_protocol


def test_a_local_phase_is_faster_on_a_slow_network(mnist, tmp_path) -> None:
    """On the bandwidth-poor preset every BSP step waits for two 25 ms crossings; a local
    round pays them once per H steps."""
    job = dict(epochs=1.0, workers=4, cluster="wan-1g")
    bsp = simulate(tmp_path, mnist, "bsp", schedule="bsp", **job).summary
    local = simulate(tmp_path, mnist, "local", schedule="local-8", **job).summary
    # 25 BSP steps of 20 + 50 ms against 4 rounds of 8 x 20 + 50 ms (the last one cut).
    assert local["wall_time_s"] < bsp["wall_time_s"] / 2


def test_a_worker_crashing_mid_round_loses_only_its_unsent_steps(mnist, tmp_path) -> None:
    faults = [{"kind": "crash", "worker": 1, "at": 0.5}]
    result = simulate(
        tmp_path, mnist, schedule="bsp:0.25,local-4", epochs=3.0, faults=faults, servers=2
    )
    summary = result.summary
    assert summary["status"] == "complete"
    assert summary["traffic"]["unsent_local_samples"] == {"worker_died": 4 * 16}
    accounted(summary)


@pytest.mark.parametrize("outer", ["nesterov"])
def test_a_resumed_run_continues_its_outer_optimizer(mnist, tmp_path, outer: str) -> None:
    job = dict(
        schedule="bsp:0.25,local-4",
        outer_optimizer=outer,
        outer_lr=0.7,
        epochs=4.0,
        checkpoint_every=0.1,
        workers=4,
    )
    whole = simulate(tmp_path, mnist, "whole", **job)
    interrupted = {**JOB, **job, "out": str(tmp_path / "cut")}
    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(**interrupted), dataset=mnist, loss_fn=InterruptAfter(260))
    stopped = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert stopped["status"].startswith("failed")
    resumed = train(TrainConfig(**interrupted), dataset=mnist, resume=True)
    assert resumed.summary["status"] == "complete"
    assert resumed.summary["samples_by_protocol"]["local"] > 0
    assert resumed.summary["reliability"]["failures"][-1]["kind"] == "resumed"
    accounted(resumed.summary)
    # Bit for bit the uninterrupted run: a resumed worker's data order goes on after the
    # batches its local rounds drew (H per delta), not after its message count.
    for key in ("validation", "test", "final_value"):
        assert resumed.summary[key] == whole.summary[key]


def test_the_elastic_policy_excludes_a_straggler_from_local_rounds(mnist, tmp_path) -> None:
    slow = {"workers": [3], "start": 0.3, "duration": 0.4, "factor": 5.0}
    result = simulate(
        tmp_path,
        mnist,
        schedule="bsp:0.2,local-2",
        epochs=20.0,
        stragglers=[slow],
        online_policy="elastic",
        batch_size=32,
    )
    summary = result.summary
    actions = [(d["action"], d["worker"]) for d in summary["online"]["decisions"]]
    assert actions[:2] == [("exclude", 3), ("readmit", 3)]
    assert summary["gradients"]["dropped"].get("straggler_excluded", 0) > 0
    accounted(summary)
