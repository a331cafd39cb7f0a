"""Sync-Switch on GPUs: ResNet-20 on CIFAR-shaped data, 8 workers sharing the GPUs, beside
plain PyTorch DDP on the same GPUs and model.

Rows: BSP, ASP and bsp:0.25,asp (scaled momentum) through `syncswitch`, each the same
workload (samples), with samples/s, time against BSP and the switch's overhead; then DDP
(allreduce, one process per worker, the same per-worker batch) as the peer. Data: a local
CIFAR-10 copy when --data-dir holds one, else synthetic tensors of CIFAR-10's shape (labelled
so in every row; accuracy on them says only that training learns the planted classes). No
timing is emulated: every figure is real compute on the device.

    python benchmarks/gpu.py                          # on a CUDA machine: the table
    python benchmarks/gpu.py --data-dir ~/data        # with a local CIFAR-10 copy
    python benchmarks/gpu.py --device cpu --quick     # the same code path on a CPU, small
    python benchmarks/gpu.py --model mlp17m           # 16.9M parameters on MNIST-1D
    python benchmarks/gpu.py --precision bf16-mixed   # workers (and DDP) under bf16 autocast

`--model mlp17m` / `mlp100m` (benchmarks/wide_models.py: 16.9M / 101M parameters) trains the
large-model benchmark's MLPs on MNIST-1D (generated locally) instead of ResNet-20 on CIFAR.
`--precision bf16-mixed` runs every syncswitch row with `--precision bf16-mixed` and the DDP
peer's forward pass under the same bfloat16 autocast; compare it with a run at the default 32
on the same machine (its results are named apart, <device>-bf16-mixed).

Results: benchmarks/results/gpu/<device>.json and .md (the table printed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from harness import (
    Timing,
    add_out,
    add_quick,
    check_timing,
    markdown_table,
    parser,
    row_from,
    save_json,
    save_text,
)
from wide_models import mlp17m, mlp100m

from syncswitch.config import TrainConfig
from syncswitch.core.sync.precision import Precision, forward_precision
from syncswitch.errors import WorkloadError
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train
from syncswitch.workloads import ArrayDataset, build_model, load_dataset, prepare_batch

RESULTS = Path("benchmarks/results/gpu")
HERE = str(Path(__file__).resolve().parent)
WIDE_MODELS = {"mlp17m": mlp17m, "mlp100m": mlp100m}
SCHEDULES = ("bsp", "asp", "bsp:0.25,asp")


@dataclass(frozen=True)
class Setup:
    model: str  # resnet20, or one of wide_models.py's MLPs
    device: str
    workers: int
    batch_size: int
    epochs: float
    train_samples: int  # synthetic data only
    test_samples: int
    gpus_per_worker: float
    precision: str = Precision.FLOAT32.value  # the workers' (and the DDP peer's) forward pass


@dataclass
class GpuRow:
    """One row of the table: a syncswitch schedule, or the DDP peer (with its backend)."""

    schedule: str
    final_accuracy: float | None
    wall_time_s: float
    samples: int
    samples_per_s: float
    setup_time_s: float | None = None
    switch_overhead_ms: list[float] | None = None
    gradients: Any = None
    placement: Any = None
    backend: str | None = None  # DDP only
    data: str | None = None


def setup_from(args: argparse.Namespace) -> Setup:
    if args.quick:
        # The code path, not a measurement: small enough for two CPU cores in a minute.
        return Setup(args.model, args.device, 2, 16, 1.0, 256, 64, 0.0, args.precision)
    return Setup(
        args.model,
        args.device,
        args.workers,
        args.batch_size,
        args.epochs,
        50_000,
        10_000,
        0.0,
        args.precision,
    )


def model_factory(setup: Setup, dataset: ArrayDataset) -> Callable[[], torch.nn.Module]:
    if setup.model in WIDE_MODELS:
        return WIDE_MODELS[setup.model]
    return partial(build_model, setup.model, dataset)


# -- data ----------------------------------------------------------------------------------------


def cifar_or_synthetic(
    data_dir: str | None, setup: Setup, seed: int = 0
) -> tuple[ArrayDataset, str]:
    if setup.model in WIDE_MODELS:
        return load_dataset("mnist1d", mnist1d_samples=setup.train_samples), "MNIST-1D"
    if data_dir:
        try:
            return load_dataset("cifar10", data_dir), f"CIFAR-10 from {data_dir}"
        except WorkloadError as error:
            print(f"no CIFAR-10 in {data_dir} ({error}); using synthetic tensors", flush=True)
    return synthetic_cifar(setup.train_samples, setup.test_samples, seed), "synthetic"


def synthetic_cifar(train: int, test: int, seed: int) -> ArrayDataset:
    """uint8 NCHW images of CIFAR-10's shape: a fixed random pattern per class under noise,
    so the classes can be learnt (accuracy above 10% means training works, nothing more)."""
    rng = np.random.default_rng(seed)
    patterns = rng.integers(0, 256, size=(10, 3, 32, 32)).astype(np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.integers(0, 10, size=n)
        noise = rng.integers(0, 256, size=(n, 3, 32, 32)).astype(np.float32)
        images = 0.5 * patterns[labels] + 0.5 * noise
        return images.astype(np.uint8), labels.astype(np.int64)

    x_train, y_train = draw(train)
    x_test, y_test = draw(test)
    # Named cifar10 so the CIFAR channel statistics and ResNet-20 apply; labelled synthetic
    # in every result row.
    return ArrayDataset("cifar10", x_train, y_train, x_test, y_test, 10, augment="cifar")


# -- syncswitch ------------------------------------------------------------------------------------


def run_syncswitch(schedule: str, dataset: ArrayDataset, setup: Setup, out: Path) -> GpuRow:
    run_dir = out / schedule.replace(":", "").replace(",", "-")
    shutil.rmtree(run_dir, ignore_errors=True)  # measured again from scratch
    config = TrainConfig(
        dataset=dataset.name,
        model=f"wide_models:{setup.model}" if setup.model in WIDE_MODELS else setup.model,
        workers=setup.workers,
        batch_size=setup.batch_size,
        epochs=setup.epochs,
        schedule=schedule,
        lr=0.1 * setup.workers * setup.batch_size / 128,  # linear scaling from lr 0.1 at 128
        momentum=0.9,
        momentum_at_switch="scale",
        weight_decay=5e-4,
        eval_every=0.5,
        device=setup.device,
        gpus_per_worker=setup.gpus_per_worker,
        precision=setup.precision,
        progress=False,
        out=str(run_dir),
    )
    summary = train(config, dataset=dataset, print_summary=False).summary
    return GpuRow(
        schedule=schedule,
        final_accuracy=summary.final_value,
        wall_time_s=summary.wall_time_s,
        setup_time_s=summary.setup_time_s,
        samples=summary.samples,
        samples_per_s=summary.samples_per_s,
        switch_overhead_ms=[1000 * s.overhead_s for s in summary.switches],
        gradients=summary.gradients,
        placement=summary.placement,
    )


# -- the DDP peer ----------------------------------------------------------------------------------


def run_ddp(dataset: ArrayDataset, setup: Setup) -> GpuRow:
    """Plain DDP: one process per worker, each its own shard and the same per-worker batch,
    for the same number of samples; NCCL when every worker has a GPU of its own, else gloo
    (NCCL refuses two ranks on one GPU)."""
    import torch.multiprocessing as mp

    gpus = torch.cuda.device_count() if setup.device == "cuda" else 0
    backend = "nccl" if gpus and setup.workers <= gpus else "gloo"
    with tempfile.TemporaryDirectory() as scratch:
        result = Path(scratch) / "rank0.json"
        mp.spawn(
            _ddp_worker,
            args=(setup, dataset, backend, _free_port(), str(result)),
            nprocs=setup.workers,
            join=True,
        )
        row = row_from(GpuRow, json.loads(result.read_text()))
    row.backend = backend
    return row


def _ddp_worker(
    rank: int, setup: Setup, dataset: ArrayDataset, backend: str, port: int, result: str
) -> None:
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=setup.workers)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cuda = setup.device == "cuda"
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if cuda else "cpu")
    model = model_factory(setup, dataset)().to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    lr = 0.1 * setup.workers * setup.batch_size / 128
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    shard = np.arange(rank, len(dataset.y_train), setup.workers)
    steps = int(setup.epochs * len(dataset.y_train) / (setup.batch_size * setup.workers))
    rng = np.random.default_rng(rank)
    generator = torch.Generator().manual_seed(rank)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        indices = rng.choice(shard, size=setup.batch_size, replace=False)
        x, y = prepare_batch(
            dataset,
            dataset.x_train[indices],
            dataset.y_train[indices],
            train=True,
            generator=generator,
        )
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with forward_precision(Precision(setup.precision), device):
            loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        optimizer.step()
    if cuda:
        torch.cuda.synchronize(device)
    dist.barrier()
    elapsed_s = time.perf_counter() - started
    if rank == 0:
        samples = steps * setup.batch_size * setup.workers
        row = GpuRow(
            schedule="DDP (allreduce)",
            final_accuracy=_accuracy(model, dataset, device),
            wall_time_s=elapsed_s,
            samples=samples,
            samples_per_s=samples / elapsed_s,
        )
        Path(result).write_text(json.dumps(asdict(row)))
    dist.destroy_process_group()


def _accuracy(model: torch.nn.Module, dataset: ArrayDataset, device: torch.device) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(dataset.y_test), 1000):
            x, y = prepare_batch(
                dataset,
                dataset.x_test[start : start + 1000],
                dataset.y_test[start : start + 1000],
                train=False,
            )
            correct += int((model(x.to(device)).argmax(1).cpu() == y).sum())
    return correct / len(dataset.y_test)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- the table -------------------------------------------------------------------------------------


def table(rows: list[GpuRow], data: str, setup: Setup, hardware: str) -> str:
    bsp = next(r for r in rows if r.schedule == "bsp").wall_time_s
    title = (
        f"{setup.model}, {data} data, {setup.workers} workers x batch {setup.batch_size}, "
        f"{setup.epochs:g} epochs, device {setup.device} ({hardware}), precision "
        f"{setup.precision}; real timing, no emulation"
    )
    columns = ("run", "final acc %", "wall time s", "samples/s", "time vs BSP")
    columns += ("switch overhead ms",)
    cells = []
    for r in rows:
        overhead = ", ".join(f"{ms:.2f}" for ms in r.switch_overhead_ms or []) or "-"
        label = r.schedule + (f" ({r.backend})" if r.backend is not None else "")
        cells.append(
            (
                label,
                f"{100 * (r.final_accuracy or 0):.1f}",
                f"{r.wall_time_s:.1f}",
                f"{r.samples_per_s:,.0f}",
                f"{r.wall_time_s / bsp:.2f}x",
                overhead,
            )
        )
    return "\n".join([check_timing(title, Timing.REAL), "", *markdown_table(columns, cells)])


def hardware_name(device: str) -> str:
    if device == "cuda":
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return f"{len(names)} x {names[0]}" if names else "no GPU visible"
    return f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}"


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    cli.add_argument(
        "--model",
        choices=["resnet20", *WIDE_MODELS],
        default="resnet20",
        help="resnet20 on CIFAR-shaped data (default), or a large MLP on MNIST-1D",
    )
    cli.add_argument("--workers", type=int, default=8)
    cli.add_argument("--batch-size", type=int, default=128)
    cli.add_argument("--epochs", type=float, default=2.0)
    cli.add_argument("--data-dir", default=None, help="a local CIFAR-10 copy (optional)")
    add_quick(cli, "2 workers, 256 samples: a smoke run")
    cli.add_argument("--no-ddp", action="store_true", help="skip the DDP peer")
    cli.add_argument(
        "--precision",
        choices=[p.value for p in Precision],
        default=Precision.FLOAT32.value,
        help="the workers' forward pass: 32 (float32, default) or bf16-mixed (bfloat16 autocast)",
    )
    add_out(cli, RESULTS, "where results go: <out>/<device>.json and .md")
    args = cli.parse_args()
    # Ray's workers import wide_models by name: put this folder on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    setup = setup_from(args)
    dataset, data = cifar_or_synthetic(args.data_dir, setup)
    name = setup.device if setup.model == "resnet20" else f"{setup.device}-{setup.model}"
    if setup.precision != Precision.FLOAT32.value:
        name += f"-{setup.precision}"
    out = args.out / (name + ("-quick" if args.quick else ""))
    hardware = hardware_name(setup.device)
    # One local Ray for every run (train() joins it rather than starting its own).
    start_local(setup.workers + 4)
    rows = []
    for schedule in SCHEDULES:
        rows.append(run_syncswitch(schedule, dataset, setup, out))
        print(f"{schedule}: {rows[-1].samples_per_s:.0f} samples/s", flush=True)
    if not args.no_ddp:
        rows.append(run_ddp(dataset, setup))
        print(f"DDP: {rows[-1].samples_per_s:.0f} samples/s", flush=True)
    for row in rows:
        row.data = data
    text = table(rows, data, setup, hardware)
    record = {"setup": setup.__dict__, "data": data, "hardware": hardware, "rows": rows}
    save_json(out.with_suffix(".json"), record, indent=2)
    save_text(out.with_suffix(".md"), text + "\n")
    print(text)


if __name__ == "__main__":
    main()
