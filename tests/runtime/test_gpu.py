"""Training on CUDA (skipped without a GPU), and the GPU benchmark's code path on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from syncswitch.core.sync.optimizer import FlatParameters
from tests.runtime.jobs import run

REPO = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def accounted(summary: dict) -> None:
    acct = summary["gradients"]
    assert acct["unaccounted"] == 0
    assert acct["sent"] == acct["applied"] + sum(acct["dropped"].values())


@pytest.mark.gpu
@needs_cuda
def test_staged_gradients_leave_the_gpu_as_the_cpu_computes_them():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    gpu_model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    cpu, gpu = FlatParameters(cpu_model), FlatParameters(gpu_model.cuda())
    assert gpu.staged and gpu._host_out.is_pinned()
    weights = np.random.default_rng(0).standard_normal(cpu.values.numel()).astype(np.float32)
    x = torch.linspace(-1, 1, 24).reshape(4, 6)
    for flat, model, inputs in ((cpu, cpu_model, x), (gpu, gpu_model, x.cuda())):
        flat.load(weights)
        flat.zero_grad()
        model(inputs).pow(2).sum().backward()
    np.testing.assert_allclose(gpu.gradient_to_host(), cpu.gradient_to_host(), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.ray
@needs_cuda
@pytest.mark.parametrize("server_device", ["cpu", "cuda"])
def test_two_workers_train_on_cuda_and_every_gradient_is_accounted(
    ray_session, small_mnist, tmp_path, server_device
):
    result = run(
        tmp_path,
        small_mnist,
        workers=2,
        device="cuda",
        evaluator_device="cuda",
        server_device=server_device,
        schedule="bsp:0.5,asp",
        epochs=8.0,
    )
    summary = result.summary
    assert summary["status"] == "complete"
    # 10 classes, chance is 0.1; the same job on the CPU ends at 0.36 after 6 epochs.
    assert summary["final_value"] > 0.2
    accounted(summary)
    resources = summary["placement"]["resources"]
    assert resources["worker"]["device"] == "cuda" and resources["worker"]["num_gpus"] > 0
    actors = json.loads((result.run_dir / "actors.json").read_text())["actors"]
    assert {actors[f"worker {w}"]["device"] for w in range(2)} == {"cuda"}
    assert actors["evaluator"]["device"] == "cuda"
    assert actors["server 0"]["device"] == server_device
    # Checkpoints hold CPU tensors whatever the server's device (they load without a GPU).
    from syncswitch.core.reliability.checkpoints import CheckpointStore

    state = CheckpointStore(result.run_dir / "checkpoints").load_latest().state
    optimizer = state["servers"][0]["optimizer"]
    assert optimizer["weights"].device.type == "cpu"


# Slow (about 100 s on 2 cores: ResNet-20 in three Ray runs and a DDP peer): the benchmark's
# own code path, run with `pytest -m slow` rather than in every CI run.
@pytest.mark.slow
@pytest.mark.ray
def test_the_gpu_benchmark_runs_its_cpu_path(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu.py", "--device", "cpu", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "cpu-quick.json").read_text())
    assert record["data"] == "synthetic"
    rows = {row["schedule"]: row for row in record["rows"]}
    assert set(rows) == {"bsp", "asp", "bsp:0.25,asp", "DDP (allreduce)"}
    for schedule in ("bsp", "asp", "bsp:0.25,asp"):
        accounted(rows[schedule])
        assert rows[schedule]["samples"] >= 0.9 * 256  # 10% of the samples are validation
    assert len(rows["bsp:0.25,asp"]["switch_overhead_ms"]) == 1
    assert rows["DDP (allreduce)"]["backend"] == "gloo" and rows["DDP (allreduce)"]["samples"] > 0
    table = (tmp_path / "cpu-quick.md").read_text()
    assert "synthetic data" in table and "| DDP (allreduce) (gloo) |" in table
