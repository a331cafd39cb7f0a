"""Training samples/s of plain PyTorch, PyTorch DDP and syncswitch ASP and BSP, side by side.

No emulation: every system computes real gradients, and nothing sleeps. The job is the same for
all four: MNIST-1D generated locally by the project's dataset code (the default 10,000 samples,
8,000 of them for training), the project's 1-D CNN (`cnn1d`), batch 32 per process or worker,
SGD at syncswitch's defaults, and --epochs passes over the training set (the plain loop, the
fastest, makes --plain-epochs passes, by default 3x as many, so that its run lasts about as
long as the others').

Learning rate: syncswitch's lr 0.2 is that of an update of workers x 32 samples, with momentum
0.9. DDP's update averages the ranks' gradients, so it uses them as they are; the plain loop's
update is one batch of 32, so it uses lr / workers (0.025 for 8), syncswitch's own linear
scaling for one batch, with momentum 0.9. (At lr 0.2 the plain loop does not train: its loss
stays at chance level. The rate is the same either way, within noise; measured.)

- plain: one process, started as the DDP ranks are, a plain training loop: torch.optim.SGD,
  zero-grad, forward, cross-entropy, backward, step.
- ddp: --workers processes started by torch.multiprocessing, DistributedDataParallel over gloo
  (MASTER_ADDR 127.0.0.1), each rank on its DistributedSampler shard, one torch thread each.
- asp, bsp: syncswitch's train() with --schedule asp / bsp and --workers workers, everything
  else at its default (evaluation every 5%, checkpoints, the divergence guard).

Both loops index the in-memory training tensors with the sampler's order (no DataLoader), as
syncswitch's workers index their numpy arrays. Each system's rate is measured over the same kind
of steady window: the applied steps (plain and DDP: optimizer steps of every rank; syncswitch:
rows of the run's updates.csv, one per applied gradient) stamped between 20% and 90% of the
time from the first to the last step, times batch size, over the window's length. Start-up
and the tail are left out.

Each repeat runs the four systems one after the other, starting one system later each repeat
(plain, ddp, asp, bsp; then ddp, asp, bsp, plain; ...), so slow spells of this shared machine
fall on all of them alike. Ratios (asp/plain, bsp/plain, bsp/ddp, asp/ddp) are taken within a
repeat, then their median over repeats is reported. One local Ray instance serves the whole
script; it idles while the plain and DDP loops run.

    python benchmarks/throughput.py                        # 8 workers, 3 repeats (~6 min here)
    python benchmarks/throughput.py --repeats 1 --epochs 4 --out /tmp/tp   # a quick look

Results: --out (default benchmarks/results/throughput/): table.md and runs.json, rewritten
after every run; syncswitch's run directories and the loops' step times under runs/ and raw/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from harness import (
    Timing,
    add_out,
    add_repeats,
    args_record,
    cell,
    check_timing,
    comma_list,
    markdown_table,
    medians,
    ratio,
    save_json,
    save_text,
)
from harness import (
    parser as harness_parser,
)
from steady import WINDOW, read_csv_rows, steady_rate
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from syncswitch.config import TrainConfig
from syncswitch.import_path import is_import_path, resolve
from syncswitch.rundir import names
from syncswitch.workloads import ArrayDataset, build_model, load_dataset

OUT = Path("benchmarks/results/throughput")
SYSTEMS = ("plain", "ddp", "asp", "bsp")
# (numerator, denominator) of each ratio, taken within one repeat.
RATIOS = (("asp", "plain"), ("bsp", "plain"), ("bsp", "ddp"), ("asp", "ddp"))
LOOP_TIMEOUT_S = 600.0  # a DDP rank that hangs (gloo on an overloaded machine) is killed


# -- arithmetic (pure; tested in tests/runtime/test_throughput_arith.py) ---------------------


def repeat_ratios(rates: dict[str, float | None]) -> dict[str, float | None]:
    """Each ratio of RATIOS from one repeat's samples/s; None where a system has no figure."""
    ratios: dict[str, float | None] = {}
    for top, bottom in RATIOS:
        ratios[f"{top}/{bottom}"] = ratio(rates.get(top), rates.get(bottom))
    return ratios


def rotated(systems: Sequence[str], repeat: int) -> list[str]:
    """The order of the systems in one repeat: each repeat starts one system later."""
    shift = repeat % len(systems)
    return [*systems[shift:], *systems[:shift]]


def table(
    repeats: list[dict], workers: int, batch_size: int, epochs: float, plain_epochs: float
) -> str:
    """The markdown table: median samples/s per system, median within-repeat ratios."""
    rates = medians(r["samples_per_s"] for r in repeats)
    ratios = medians(r["ratios"] for r in repeats)
    head = (
        f"**No emulation, real compute, {workers} processes on a {os.cpu_count()}-core shared "
        f"machine.** MNIST-1D, cnn1d, batch {batch_size} per process, {epochs:g} epochs per "
        f"system ({plain_epochs:g} for the plain loop); samples/s over the steady window "
        f"({WINDOW[0]:.0%}-{WINDOW[1]:.0%} of each run's steps); medians of {len(repeats)} "
        "repeat(s), ratios taken within a repeat.\n\n"
    )
    check_timing(head, Timing.REAL)
    names = {
        "plain": "plain PyTorch, 1 process",
        "ddp": f"PyTorch DDP (gloo), {workers} processes",
        "asp": f"syncswitch ASP, {workers} workers",
        "bsp": f"syncswitch BSP, {workers} workers",
    }
    systems = [
        (
            names[system],
            cell(rates.get(system), ",.0f"),
            ", ".join(cell(r["samples_per_s"].get(system), ",.0f") for r in repeats),
        )
        for system in SYSTEMS
    ]
    per_ratio = [
        (
            key,
            cell(ratios[key], ".2f"),
            ", ".join(cell(r["ratios"].get(key), ".2f") for r in repeats),
        )
        for key in ratios
    ]
    rows = [
        *markdown_table(("system", "samples/s", "per repeat"), systems),
        "",
        *markdown_table(("ratio", "median", "per repeat"), per_ratio),
    ]
    return head + "\n".join(rows) + "\n"


# -- plain PyTorch and DDP ----------------------------------------------------------------------


@dataclass(frozen=True)
class LoopJob:
    """What one training-loop process needs; `world` 1 without DDP is the plain loop."""

    dataset: ArrayDataset
    world: int
    ddp: bool
    batch_size: int
    steps: int  # optimizer steps per process
    lr: float
    momentum: float
    seed: int
    threads: int
    port: int
    raw_dir: str
    model: str = "cnn1d"  # a built-in name, or an import path (MODULE:NAME)
    keep_freed_memory: bool = False  # glibc malloc as syncswitch's actors set it
    link_gbps: float = 0.0  # DDP: each rank's EMULATED link (emulated_link_hook); 0: none
    link_latency_ms: float = 0.0


def ring_link_s(nbytes: int, world: int, gbps: float, latency_ms: float) -> float:
    """A ring all-reduce of `nbytes` on links of `gbps` each way: 2 (n-1) steps (reduce-scatter,
    then all-gather), each moving a 1/n chunk each way at once, after one latency."""
    return 2 * (world - 1) * (latency_ms / 1e3 + nbytes / world * 8 / (gbps * 1e9))


def emulated_link_hook(gbps: float, latency_ms: float, world: int) -> Callable:
    """A DDP communication hook for an EMULATED link of `gbps` per rank, each direction: each
    bucket's all-reduce (gloo, on loopback) is followed by the time a ring all-reduce moves its
    bytes on that link, 2 (n-1)/n of them each way at once, plus 2 (n-1) latencies. The sleep
    runs on the thread that completes the collective, so buckets cross the link one after
    another while backward goes on, as they would on a real link."""

    # Unannotated: DDP checks a hook's annotations against its own types, and this module's
    # annotations are strings (from __future__ import annotations).
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        tensor = bucket.buffer()
        link_s = ring_link_s(tensor.numel() * tensor.element_size(), world, gbps, latency_ms)
        work = dist.all_reduce(tensor.div_(world), async_op=True)
        assert work is not None

        def crossed(done: torch.futures.Future) -> torch.Tensor:
            time.sleep(link_s)
            return done.value()[0]

        return work.get_future().then(crossed)

    return hook


def loop_model(name: str, dataset: ArrayDataset) -> torch.nn.Module:
    """A built-in model sized for `dataset`, or the factory an import path names."""
    if is_import_path(name):
        return resolve(name, "model")()
    return build_model(name, dataset)


def training_loop(rank: int, job: LoopJob) -> None:
    """One process: plain SGD (or one DDP rank); writes its step time stamps to raw_dir."""
    entered = time.monotonic()
    torch.set_num_threads(job.threads)
    if job.keep_freed_memory:
        from syncswitch.runtime.ray.allocator import keep_freed_memory

        keep_freed_memory()
    if job.ddp:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(job.port)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback, not the LAN address
        dist.init_process_group("gloo", rank=rank, world_size=job.world)
    torch.manual_seed(job.seed)  # the same initial weights on every rank, as DDP expects
    model = loop_model(job.model, job.dataset)
    model.train()
    if job.ddp:
        model = DistributedDataParallel(model)
        if job.link_gbps > 0:
            model.register_comm_hook(
                None, emulated_link_hook(job.link_gbps, job.link_latency_ms, job.world)
            )
    optimizer = torch.optim.SGD(model.parameters(), lr=job.lr, momentum=job.momentum)
    x = torch.from_numpy(job.dataset.x_train)
    y = torch.from_numpy(job.dataset.y_train)
    # With one replica this is a seeded shuffle of the whole set: one code path for both loops.
    sampler = DistributedSampler(
        range(len(y)), num_replicas=job.world, rank=rank, shuffle=True, seed=job.seed
    )
    stamps: list[float] = []
    epoch = 0
    loss = torch.zeros(())
    while len(stamps) < job.steps:
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        # Full batches only: every step is batch_size samples, as in syncswitch.
        for start in range(0, len(order) - job.batch_size + 1, job.batch_size):
            batch = order[start : start + job.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()  # DDP all-reduces the gradient here
            optimizer.step()
            stamps.append(time.monotonic())  # one clock for every process on this machine
            if len(stamps) == job.steps:
                break
        epoch += 1
    if job.ddp:
        dist.destroy_process_group()
    record = {
        "rank": rank,
        "entered": entered,
        "stamps": stamps,
        "final_loss": float(loss.detach()),
    }
    Path(job.raw_dir, f"rank{rank}.json").write_text(json.dumps(record))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_loop(job: LoopJob) -> dict:
    """Start `job.world` loop processes, wait for them (killing them past a deadline), and
    measure the merged step stamps."""
    raw = Path(job.raw_dir)
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    launched = time.monotonic()
    # forkserver: each process is forked from one that has already imported torch (spawn
    # would import it afresh in every rank: seconds each on this machine), and never from
    # this process, whose Ray threads a fork would copy.
    context = mp.start_processes(
        training_loop, args=(job,), nprocs=job.world, join=False, start_method="forkserver"
    )
    deadline = time.monotonic() + LOOP_TIMEOUT_S
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the loop did not finish in {LOOP_TIMEOUT_S:g} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()  # only the processes started just above
    records = [json.loads(raw.joinpath(f"rank{r}.json").read_text()) for r in range(job.world)]
    entered = [record["entered"] - launched for record in records]
    stamps = [t for record in records for t in record["stamps"]]
    steps_per_s = steady_rate(stamps)
    return {
        "samples_per_s": steps_per_s * job.batch_size,
        "steps": len(stamps),
        "wall_s": max(stamps) - min(stamps),
        # From launching the processes: when the last entered the loop, when the first step
        # ended (imports, process group rendezvous, model build come before it).
        "start_up_s": {
            "last_entered": max(entered),
            "first_step": min(stamps) - launched,
        },
        "final_loss": [record["final_loss"] for record in records],
    }


# -- syncswitch -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncswitchRun:
    """One syncswitch run's figures (runs.json), beside the loops' own."""

    samples_per_s: float
    gradients: int
    wall_s: float
    run_samples_per_s: float | None
    final_accuracy: float | None
    switches: int
    rollbacks: int


def run_syncswitch(config: TrainConfig) -> dict:
    """Train `config` with syncswitch; measure its applied gradients from updates.csv."""
    from syncswitch.runtime.train import train  # imports Ray: not in the loops' processes

    run_dir = Path(str(config.out))
    shutil.rmtree(run_dir, ignore_errors=True)  # measured again from scratch
    summary = train(config, print_summary=False).summary
    # One row per applied gradient, each of batch_size samples (BSP: workers rows per update).
    times_s = [float(row["time_s"]) for row in read_csv_rows(run_dir / names.UPDATES)]
    figures = SyncswitchRun(
        samples_per_s=steady_rate(times_s) * config.batch_size,
        gradients=len(times_s),
        wall_s=summary.wall_time_s,
        run_samples_per_s=summary.samples_per_s,
        final_accuracy=summary.final_value,
        # A divergence rollback would pin an ASP run to BSP: say so next to its figure.
        switches=len(summary.switches or []),
        rollbacks=summary.reliability.rollbacks if summary.reliability else 0,
    )
    return asdict(figures)


# -- the script ---------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = harness_parser(__doc__, epilog=True)
    parser.add_argument(
        "--workers", type=int, default=8, help="DDP processes and syncswitch workers (default 8)"
    )
    add_repeats(parser, 3, "rounds of all four systems")
    parser.add_argument(
        "--epochs",
        type=float,
        default=12.0,
        help="passes over the 8,000 training samples by DDP, ASP and BSP (default 12: about "
        "10-20 s of training each on the 2-core development machine, plus start-up)",
    )
    parser.add_argument(
        "--plain-epochs",
        type=float,
        default=None,
        help="passes for the plain loop (default 3 x --epochs: it is the fastest system, and "
        "a run of a few seconds is easily skewed by a burst of another user's load)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="per process (default 32)")
    parser.add_argument(
        "--plain-threads",
        type=int,
        default=1,
        help="torch threads of the plain loop (default 1, as each DDP rank and syncswitch "
        "worker; with 2 the loop ran 7-20x slower on the shared 2-core machine)",
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="which systems to run, comma-separated (default all: plain,ddp,asp,bsp)",
    )
    add_out(parser, OUT)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    systems = [s for s in SYSTEMS if s in comma_list(args.systems)]
    if args.plain_epochs is None:
        args.plain_epochs = 3 * args.epochs
    args.out.mkdir(parents=True, exist_ok=True)
    defaults = TrainConfig(progress=False)
    dataset = load_dataset(defaults.dataset, mnist1d_samples=defaults.mnist1d_samples)
    train_samples = len(dataset.y_train)
    if {"asp", "bsp"} & set(systems):
        from syncswitch.runtime.ray.connect import start_local

        start_local(args.workers + 4)

    def loop_job(system: str, seed: int) -> LoopJob:
        world = args.workers if system == "ddp" else 1
        epochs = args.epochs if system == "ddp" else args.plain_epochs
        return LoopJob(
            dataset=dataset,
            world=world,
            ddp=system == "ddp",
            batch_size=args.batch_size,
            steps=int(epochs * train_samples) // (args.batch_size * world),
            # Linear scaling, as syncswitch scales an update of k of the workers' batches.
            lr=defaults.lr * world / args.workers,
            momentum=defaults.momentum,
            seed=seed,
            threads=1 if system == "ddp" else args.plain_threads,
            port=free_port(),
            raw_dir=str(args.out / "raw" / f"{system}-s{seed}"),
        )

    def sync_config(system: str, seed: int) -> TrainConfig:
        return TrainConfig(
            workers=args.workers,
            batch_size=args.batch_size,
            schedule=system,
            epochs=args.epochs,
            seed=seed,
            progress=False,
            out=str(args.out / "runs" / f"{system}-s{seed}"),
        )

    repeats: list[dict] = []
    meta = {
        "label": f"no emulation, real compute, {args.workers} processes on a "
        f"{os.cpu_count()}-core shared machine",
        "args": args_record(args),
        "window": WINDOW,
        "train_samples": train_samples,
        "lr_per_workers_x_batch": defaults.lr,
        "momentum": defaults.momentum,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    for seed in range(args.repeats):
        repeat = {"seed": seed, "order": rotated(systems, seed), "samples_per_s": {}, "runs": {}}
        for system in repeat["order"]:
            started = time.monotonic()
            try:
                if system in ("asp", "bsp"):
                    run = run_syncswitch(sync_config(system, seed))
                else:
                    job = loop_job(system, seed)
                    run = {**run_loop(job), "threads": job.threads, "lr": job.lr}
            except Exception as error:  # one failed system must not lose the others' figures
                run = {"error": f"{type(error).__name__}: {error}"}
                print(f"repeat {seed}, {system}: FAILED: {run['error']}", flush=True)
            run["elapsed_s"] = time.monotonic() - started
            repeat["runs"][system] = run
            repeat["samples_per_s"][system] = run.get("samples_per_s")
            if "samples_per_s" in run:
                changed = run.get("switches") or run.get("rollbacks")
                note = " (switched or rolled back: not a pure run!)" if changed else ""
                print(
                    f"repeat {seed}, {system}: {run['samples_per_s']:,.0f} samples/s "
                    f"({run['elapsed_s']:.1f} s){note}",
                    flush=True,
                )
        repeat["ratios"] = repeat_ratios(repeat["samples_per_s"])
        repeats.append(repeat)
        text = table(repeats, args.workers, args.batch_size, args.epochs, args.plain_epochs)
        save_text(args.out / "table.md", text)
        save_json(args.out / "runs.json", {**meta, "repeats": repeats})
    print(
        "\n" + table(repeats, args.workers, args.batch_size, args.epochs, args.plain_epochs),
        flush=True,
    )


if __name__ == "__main__":
    main()
