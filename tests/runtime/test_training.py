"""End-to-end runs on a real local Ray with real PyTorch gradients."""

import csv
import json

import numpy as np
import pytest
import torch

from syncswitch.config import TrainConfig
from syncswitch.core.sync.sharding import BatchStream, worker_shard
from syncswitch.runtime.train import train
from syncswitch.workloads import build_model, prepare_batch
from tests.runtime.jobs import LR, read_updates, run

pytestmark = pytest.mark.ray


def test_bsp_equals_single_process_sgd_on_concatenated_batches(ray_session, small_mnist, tmp_path):
    workers, batch, seed = 3, 8, 5
    result = run(
        tmp_path,
        small_mnist,
        workers=workers,
        batch_size=batch,
        seed=seed,
        schedule="bsp",
        epochs=0.3,
        weight_decay=1e-4,
    )
    updates = result.summary["updates"]
    assert updates >= 3

    torch.manual_seed(seed)
    model = build_model("cnn1d", small_mnist)
    sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=1e-4)
    streams = [
        BatchStream(worker_shard(len(small_mnist.y_train), w, workers, seed), batch, seed, w)
        for w in range(workers)
    ]
    for _ in range(updates):
        idx = np.concatenate([s.next_indices() for s in streams])
        x, y = prepare_batch(
            small_mnist, small_mnist.x_train[idx], small_mnist.y_train[idx], train=True
        )
        sgd.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        sgd.step()
    expected = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
    np.testing.assert_allclose(result.final_weights, expected, rtol=1e-4, atol=1e-5)
    rows = read_updates(result.run_dir)
    assert {r["staleness"] for r in rows} == {"0"}


def test_asp_records_staleness_and_accounts_for_every_gradient(ray_session, small_mnist, tmp_path):
    # Emulated steps, so that four workers compute side by side: with real compute alone, a
    # loaded 2-core machine may run them one after another, every gradient on fresh weights.
    result = run(tmp_path, small_mnist, schedule="asp", workers=4, step_time_ms=10.0)
    summary = result.summary
    rows = read_updates(result.run_dir)
    acct = summary["gradients"]
    assert acct["sent"] == acct["applied"] + sum(acct["dropped"].values())
    assert acct["applied"] == len(rows) == summary["updates"]
    assert max(int(r["staleness"]) for r in rows) > 0
    assert all(float(r["lr"]) == pytest.approx(LR / 4) for r in rows)
    assert summary["final_value"] is not None and summary["status"] == "complete"


def clock_spread(rows: list[dict], workers: int) -> int:
    clocks = [0] * workers
    spread = 0
    for row in sorted(rows, key=lambda r: int(r["version"])):
        clocks[int(row["worker"])] += 1
        spread = max(spread, max(clocks) - min(clocks))
    return spread


def test_ssp_bounds_how_far_a_worker_runs_ahead(ray_session, small_mnist, tmp_path):
    # One worker three times slower: under ASP the others run far ahead, under SSP-1 they wait.
    # Steps long enough that the emulated times, not real compute on a busy machine, set pace.
    slow = dict(workers=3, step_time_ms=10.0, speed_factors=[1.0, 1.0, 3.0], epochs=1.0)
    asp = run(tmp_path / "asp", small_mnist, schedule="asp", **slow)
    ssp = run(tmp_path / "ssp", small_mnist, schedule="ssp-1", **slow)
    asp_spread = clock_spread(read_updates(asp.run_dir), 3)
    ssp_rows = read_updates(ssp.run_dir)
    assert clock_spread(ssp_rows, 3) <= 2  # s + 1: a worker at the bound finishes its step
    assert asp_spread > 4
    assert max(int(r["staleness"]) for r in ssp_rows) <= (3 - 1) * (2 * 1 + 1)
    assert ssp.summary["emulation"]["enabled"] is True


def test_bsp_to_asp_switch_changes_lr_and_momentum_in_place(ray_session, small_mnist, tmp_path):
    result = run(
        tmp_path, small_mnist, schedule="bsp:0.5,asp", workers=4, momentum_at_switch="scale"
    )
    switches = result.summary["switches"]
    assert len(switches) == 1 and switches[0]["from"] == "bsp" and switches[0]["to"] == "asp"
    assert 0.5 <= switches[0]["at_fraction"] < 0.5 + 4 * 8 / 320 + 1e-9
    assert switches[0]["overhead_s"] < 0.05
    rows = read_updates(result.run_dir)
    bsp = [r for r in rows if r["protocol"] == "bsp"]
    asp = [r for r in rows if r["protocol"] == "asp"]
    assert bsp and asp
    assert all(float(r["lr"]) == pytest.approx(LR) for r in bsp)
    assert all(float(r["momentum"]) == pytest.approx(0.9) for r in bsp)
    assert all(float(r["lr"]) == pytest.approx(LR / 4) for r in asp)
    assert all(float(r["momentum"]) == pytest.approx(0.9 / 4) for r in asp)
    assert {r["staleness"] for r in bsp} == {"0"}
    time_by_protocol = result.summary["time_by_protocol"]
    assert time_by_protocol["bsp"] > 0 and time_by_protocol["asp"] > 0


def test_bsp_asp_bsp_and_the_run_directory(ray_session, small_mnist, tmp_path):
    result = run(
        tmp_path, small_mnist, schedule="bsp:0.3,asp:0.6,bsp", workers=3, momentum_at_switch="keep"
    )
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert [(s["from"], s["to"]) for s in summary["switches"]] == [("bsp", "asp"), ("asp", "bsp")]
    rows = read_updates(result.run_dir)
    assert rows[0]["protocol"] == "bsp" and rows[-1]["protocol"] == "bsp"
    assert all(float(r["momentum"]) == pytest.approx(0.9) for r in rows)  # keep
    for key in (
        "metric",
        "final_value",
        "best_value",
        "validation",
        "test",
        "wall_time_s",
        "samples",
        "samples_per_s",
        "time_by_protocol",
        "switches",
        "emulation",
    ):
        assert key in summary
    assert summary["samples"] >= 320
    names = {p.name for p in result.run_dir.iterdir()}
    assert {
        "config.json",
        "summary.json",
        "metrics.csv",
        "updates.csv",
        "worker_steps.csv",
        "events.jsonl",
        "drops.csv",
    } <= names
    with (result.run_dir / "metrics.csv").open() as handle:
        metrics = list(csv.DictReader(handle))
    assert [float(m["fraction"]) for m in metrics] == [0.25, 0.5, 0.75, 1.0]
    assert json.loads((result.run_dir / "config.json").read_text())["emulation"] == {
        "enabled": False
    }
    with (result.run_dir / "worker_steps.csv").open() as handle:
        workers = list(csv.DictReader(handle))
    for worker in workers:
        # A step's CPU is measured in the worker, on its own thread: positive, and no more
        # than its wall time (one torch thread) give or take the clocks' resolution.
        wall, cpu = float(worker["compute_mean_s"]), float(worker["compute_cpu_mean_s"])
        assert 0 < cpu <= wall + 1e-3


def test_sharded_servers_train_the_same_model_as_one(ray_session, small_mnist, tmp_path):
    one = run(tmp_path / "one", small_mnist, schedule="bsp", epochs=0.3)
    two = run(tmp_path / "two", small_mnist, schedule="bsp", epochs=0.3, servers=2)
    np.testing.assert_allclose(one.final_weights, two.final_weights, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("schedule", "wire_dtype"), [("bsp:0.5,local-4", "float32"), ("bsp", "bfloat16")]
)
def test_values_through_shared_memory_train_what_the_socket_trains_bit_for_bit(
    ray_session, small_mnist, tmp_path, monkeypatch, schedule, wire_dtype
):
    # Both runs on this machine, now: the same bits, or a region was read while written.
    # float32: the workers' models compute in the shared regions; bfloat16: copied in.
    job = dict(schedule=schedule, epochs=0.3, servers=2, wire_dtype=wire_dtype)
    shared = run(tmp_path / "shared", small_mnist, **job)
    monkeypatch.setenv("SYNCSWITCH_DATAPLANE", "socket")
    socket = run(tmp_path / "socket", small_mnist, **job)
    np.testing.assert_array_equal(shared.final_weights, socket.final_weights)
    assert shared.summary["validation"] == socket.summary["validation"]
    for result, connections in ((shared, 3 * 2), (socket, 0)):  # workers x servers
        actors = json.loads((result.run_dir / "actors.json").read_text())
        assert actors["data_plane_shared_memory"] == {"connections": connections, "declined": {}}


class TinyMlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_python_api_trains_a_user_model_on_a_user_dataset(ray_session, tmp_path):
    from syncswitch.workloads import ArrayDataset

    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 1, 6)).astype(np.float32)
    y = (x[:, 0, 0] + x[:, 0, 1] > 0).astype(np.int64)  # linearly separable
    data = ArrayDataset("toy", x[:500], y[:500], x[500:], y[500:], num_classes=2)
    result = train(
        TrainConfig(
            workers=2,
            batch_size=16,
            epochs=4,
            lr=0.5,
            schedule="bsp:0.5,asp",
            progress=False,
            out=str(tmp_path / "toy"),
            eval_every=0.5,
        ),
        model_factory=TinyMlp,
        dataset=data,
    )
    assert result.summary["final_value"] > 0.9
    assert len(result.final_weights) == sum(p.numel() for p in TinyMlp().parameters())


def test_an_emulated_link_delays_every_message_and_changes_no_bit(
    ray_session, small_mnist, tmp_path
):
    # BSP's values do not depend on when messages arrive: the link may only cost time.
    job = dict(schedule="bsp", epochs=0.6, servers=2)
    plain = run(tmp_path / "plain", small_mnist, **job)
    # The servers' links: a shard's message (2,605 float32 values) takes 30 ms on one.
    links = dict(link_gbps=100.0, link_latency_ms=40.0, server_link_gbps=0.0028)
    turn_s = 2605 * 4 * 8 / 0.0028e9
    linked = run(tmp_path / "linked", small_mnist, **links, **job)
    np.testing.assert_array_equal(plain.final_weights, linked.final_weights)
    # On each server's link a round's 3 replies go out in turn; the first worker's next
    # request follows its reply (a turn and a latency), and the 3 requests cross in turn
    # (3 turns and a latency): a lower bound of sleeps per round, which a slow machine only
    # exceeds (without the servers' links: 2 latencies).
    rounds = linked.summary["updates"]
    assert rounds >= 5
    assert linked.summary["wall_time_s"] >= rounds * (4 * turn_s + 2 * 0.040)
    config = json.loads((linked.run_dir / "config.json").read_text())
    link = config["emulation"]["link"]
    assert (link["gbps"], link["latency_ms"]) == (100.0, 40.0)
    assert "EMULATED" in link["kind"]
    assert config["emulation"]["server_link"]["gbps"] == 0.0028
    assert not (plain.run_dir / "config.json").read_text().count('"link"')
