"""The simulator runtime end to end: real gradients, the real controller, a virtual clock."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch.config import TrainConfig
from syncswitch.core.sync.optimizer import flatten_parameters
from syncswitch.core.sync.sharding import BatchStream, worker_shard
from syncswitch.runtime.train import train
from syncswitch.workloads import build_model, prepare_batch
from tests.sim.interrupt import InterruptAfter

JOB = dict(
    batch_size=16,
    lr=0.1,
    momentum=0.9,
    lr_schedule="constant",
    eval_every=0.25,
    progress=False,
    mnist1d_samples=2000,
)


def simulate(tmp_path: Path, dataset, name: str = "run", **overrides):
    values = {**JOB, "runtime": "sim", "workers": 4, "out": str(tmp_path / name)}
    values.update(overrides)
    return train(TrainConfig(**values), dataset=dataset)


def rows(run_dir: Path, name: str) -> list[dict]:
    with (run_dir / name).open() as handle:
        return list(csv.DictReader(handle))


def accounted(summary: dict) -> None:
    counts = summary["gradients"]
    assert counts["unaccounted"] == 0
    assert counts["sent"] == counts["applied"] + sum(counts["dropped"].values())


@pytest.mark.ray
@pytest.mark.parametrize(
    ("wire_dtype", "grad_clip", "precision"),
    [
        ("float32", None, "32"),
        ("bfloat16", None, "32"),
        ("float32", 0.05, "32"),
        # ~40 s more on 2 cores; tests/sim/test_precision_sim.py checks the twins without Ray.
        pytest.param("float32", None, "bf16-mixed", marks=pytest.mark.slow),
    ],
)
def test_bsp_on_the_simulator_is_bsp_on_ray_bit_for_bit(
    ray_session, mnist, tmp_path, wire_dtype, grad_clip, precision
) -> None:
    # bfloat16: the simulator rounds messages as the data plane does (core/sync/wire_dtype.py).
    # grad_clip: the two shards exchange each round's norm (core/sync/clipping.py).
    # bf16-mixed: both compute the forward pass under the same autocast (runtime/gradient.py).
    job = dict(workers=4, servers=2, schedule="bsp", epochs=2.0, seed=3, wire_dtype=wire_dtype)
    job.update(grad_clip=grad_clip, precision=precision)
    simulated = simulate(tmp_path, mnist, "sim", **job)
    real = train(TrainConfig(**{**JOB, **job, "out": str(tmp_path / "ray")}), dataset=mnist)
    assert simulated.summary["final_value"] == real.summary["final_value"]
    assert simulated.summary["validation"] == real.summary["validation"]
    assert simulated.summary["test"] == real.summary["test"]
    scale = np.abs(real.final_weights).max()
    assert np.abs(simulated.final_weights - real.final_weights).max() <= 1e-5 * scale
    assert (simulated.summary["runtime"], real.summary["runtime"]) == ("sim", "ray")


def test_asp_with_one_worker_is_sequential_sgd(mnist, tmp_path) -> None:
    result = simulate(tmp_path, mnist, workers=1, schedule="asp", epochs=1.0, seed=2)
    # The same job as a plain PyTorch loop: one model, torch's SGD, the worker's data order.
    torch.manual_seed(2)
    model = build_model("cnn1d", mnist)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = BatchStream(worker_shard(len(mnist.y_train), 0, 1, 2), 16, 2, 0)
    for _ in range(result.summary["updates"]):
        indices = batches.next_indices()
        x, y = prepare_batch(mnist, mnist.x_train[indices], mnist.y_train[indices], train=True)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    expected = flatten_parameters(model).numpy()
    assert result.summary["updates"] == 1600 // 16
    np.testing.assert_allclose(result.final_weights, expected, rtol=1e-5, atol=1e-6)


def test_a_simulated_run_writes_a_labelled_ray_style_run_directory(mnist, tmp_path) -> None:
    result = simulate(tmp_path, mnist, workers=64, schedule="bsp:0.5,asp", epochs=2.0)
    summary, run_dir = result.summary, result.run_dir
    for name in (
        "config.json",
        "summary.json",
        "metrics.csv",
        "updates.csv",
        "drops.csv",
        "events.jsonl",
        "worker_steps.csv",
    ):
        assert (run_dir / name).is_file(), name
    assert summary["runtime"] == "sim" and summary["status"] == "complete"
    assert summary["cluster"]["compute"]["step_time_ms"] == 20.0
    assert "SIMULATED" in summary["emulation"]["kind"]
    assert json.loads((run_dir / "config.json").read_text())["simulated"] is True
    assert summary["host_time_s"] > 0 and summary["wall_time_s"] > 0
    for name in ("updates.csv", "metrics.csv", "worker_steps.csv"):
        assert {r["simulated"] for r in rows(run_dir, name)} == {"True"}, name
    accounted(summary)
    staleness = summary["staleness"]
    assert staleness["bsp"]["max"] == 0
    # Without jitter the workers leave the barrier together and stay in step: a wave of 64
    # gradients lands on each version, so staleness runs 0..63 within each wave.
    assert 25 <= staleness["asp"]["mean"] <= 40 and staleness["asp"]["max"] <= 64
    assert len(rows(run_dir, "worker_steps.csv")) == 64


def test_the_same_seed_simulates_the_same_run(mnist, tmp_path) -> None:
    job = dict(workers=6, schedule="bsp:0.25,asp", epochs=1.0, jitter_sigma=0.3)
    first = simulate(tmp_path, mnist, "a", **job)
    second = simulate(tmp_path, mnist, "b", **job)
    assert rows(first.run_dir, "updates.csv") == rows(second.run_dir, "updates.csv")
    assert np.array_equal(first.final_weights, second.final_weights)


def test_a_busy_server_link_caps_the_update_rate(mnist, tmp_path) -> None:
    # 5,210 float32 parameters: 20,840 bytes a message; at 0.05 Gbps the server's link
    # carries 300 messages/s however many workers send, while each worker alone could
    # send 50/s (20 ms steps).
    cluster = tmp_path / "slow-server.yaml"
    cluster.write_text(
        "network: {server_bandwidth_gbps: 0.05, worker_bandwidth_gbps: 100, latency_ms: 0}\n"
        "server: {message_ms: 0, ns_per_parameter: 0}\n"
    )
    rates = {}
    for workers in (4, 16):
        result = simulate(
            tmp_path,
            mnist,
            f"w{workers}",
            workers=workers,
            schedule="asp",
            epochs=4.0,
            cluster=str(cluster),
        )
        rates[workers] = result.summary["updates_per_s"]
    capacity = 0.05e9 / (8 * 4 * 5210)  # each direction of the link, pushes in, replies out
    assert rates[4] == pytest.approx(4 * 1 / (0.020 + 2 * 4 * 5210 * 8 / 0.05e9), rel=0.05)
    assert rates[16] <= capacity * 1.01
    assert rates[16] >= capacity * 0.9  # saturated: the server is the bottleneck


def test_a_workers_link_carries_its_messages_to_every_server_in_turn(mnist, tmp_path) -> None:
    # A BSP round is bound by the workers' links (0.01 Gbps: 16.7 ms per 5,210 float32
    # parameters each way, against 20 ms steps). Sharding the model over N servers splits
    # each message but not a worker's link: the shards' messages leave one after another,
    # and only the last shard's reply is left to cross once they have all left (1/N of the
    # model), not all N at once as if each had a link of its own.
    rounds = {}
    for servers in (1, 2, 4):
        result = simulate(
            tmp_path, mnist, f"s{servers}", workers=2, servers=servers, schedule="bsp",
            epochs=1.0, link_gbps=0.01,
        )  # fmt: skip
        rounds[servers] = result.summary["wall_time_s"] / result.summary["updates"]
    link_s = 5210 * 4 * 8 / 0.01e9
    for servers, round_s in rounds.items():
        assert round_s == pytest.approx(0.020 + link_s + link_s / servers, rel=0.05)
    shared = {}
    for servers in (1, 4):
        result = simulate(
            tmp_path, mnist, f"servers-link-s{servers}", workers=2, servers=servers,
            schedule="bsp", epochs=1.0, server_link_gbps=0.01,
        )  # fmt: skip
        shared[servers] = result.summary["wall_time_s"] / result.summary["updates"]
    # The servers' links: the 2 workers' requests in turn, then their replies in turn; the
    # first worker's next request overlaps the second reply, so a round is the step and
    # three messages' turns, and 4 servers carry a quarter of the bytes each.
    for servers, round_s in shared.items():
        assert round_s == pytest.approx(0.020 + 3 * link_s / servers, rel=0.05)


def test_dead_hung_and_bad_workers_on_the_simulator(mnist, tmp_path) -> None:
    faults = [
        {"kind": "crash", "worker": 1, "at": 0.3},
        {"kind": "hang", "worker": 0, "at": 0.2},
        {"kind": "nan_gradient", "worker": 2, "at": 0.5},
    ]
    result = simulate(
        tmp_path, mnist, schedule="bsp:0.6,asp", epochs=6.0, faults=faults, worker_timeout_s=3.0
    )
    summary = result.summary
    assert summary["status"] == "complete"
    causes = {f["worker"]: f for f in summary["reliability"]["failures"] if f["kind"] == "worker"}
    assert causes[0]["reason"].startswith("hung") and 1 in causes
    assert summary["gradients"]["dropped"]["non_finite"] >= 1
    accounted(summary)


def test_elastic_on_two_simulated_shards(mnist, tmp_path) -> None:
    slow = {"workers": [3], "start": 0.2, "duration": 0.4, "factor": 5.0}
    result = simulate(
        tmp_path,
        mnist,
        schedule="bsp",
        servers=2,
        online_policy="elastic",
        stragglers=[slow],
        epochs=4.0,
    )
    online = result.summary["online"]
    actions = [(d["action"], d["worker"]) for d in online["decisions"]]
    assert actions[:2] == [("exclude", 3), ("readmit", 3)]
    assert online["false_detections"] == 0
    accounted(result.summary)


def test_a_simulated_run_needs_no_ray(tmp_path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['ray'] = None; from syncswitch.cli.main import main; "
        f"sys.exit(main(['train', '--runtime', 'sim', '--workers', '16', '--epochs', '1', "
        f"'--mnist1d-samples', '1000', '--no-progress', '--out', {str(tmp_path / 'r')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SIMULATED timing" in done.stdout
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["runtime"] == "sim"


def test_an_emulated_device_overlaps_the_servers_work_with_the_step(mnist, tmp_path) -> None:
    # A server taking 10 ms per gradient serves 4 workers in 40 ms, twice their 20 ms step.
    seconds_per_round = {}
    for overlap in (False, True):
        cluster = tmp_path / f"overlap-{overlap}.yaml"
        cluster.write_text(
            f"compute: {{step_time_ms: 20, sends_during_step: {str(overlap).lower()}}}\n"
            "network: {latency_ms: 0}\nserver: {message_ms: 10, ns_per_parameter: 0}\n"
        )
        result = simulate(
            tmp_path, mnist, f"o{overlap}", schedule="bsp", epochs=2.0, cluster=str(cluster)
        )
        seconds_per_round[overlap] = result.summary["wall_time_s"] / result.summary["updates"]
    # After the step (a real device): the step, then four gradients in turn.
    assert seconds_per_round[False] == pytest.approx(0.020 + 0.040, rel=0.02)
    # During the step (an emulated one): the server's 40 ms hides the 20 ms step.
    assert seconds_per_round[True] == pytest.approx(0.040, rel=0.02)


def test_an_interrupted_simulated_run_resumes_where_it_stopped(mnist, tmp_path) -> None:
    job = dict(
        runtime="sim",
        workers=8,
        schedule="bsp:0.25,asp",
        epochs=4.0,
        checkpoint_every=0.1,
        **{k: v for k, v in JOB.items() if k != "lr_schedule"},
        out=str(tmp_path / "run"),
    )
    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(**job), dataset=mnist, loss_fn=InterruptAfter(250))
    stopped = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert stopped["status"].startswith("failed") and 0 < stopped["samples"] < 4 * 1600
    result = train(TrainConfig(**job), dataset=mnist, resume=True)
    summary = result.summary
    assert summary["status"] == "complete" and summary["runtime"] == "sim"
    assert summary["samples"] >= 4 * 1600
    assert summary["reliability"]["failures"][-1]["kind"] == "resumed"
    accounted(summary)
