"""Samples/s at the model sizes users train: syncswitch BSP, ASP and a local phase against
PyTorch DDP (gloo) and one plain process, on the same model, batch and machine, in one run.

Without --link-gbps or --server-link-gbps nothing is emulated: every system computes real
gradients and nothing sleeps. The models are MLPs built by benchmarks/wide_models.py on
MNIST-1D (generated locally): `mlp17m` (16.9M parameters, 67.6 MB in float32; the model
issue 43 measured) and `mlp100m` (101M, 404 MB).
`bsp-bf16` is BSP with bfloat16 on the wire (half the bytes each way). Workers on the
servers' machine pass values through shared memory; `bsp-socket` is BSP with every value on
the loopback socket instead (SYNCSWITCH_DATAPLANE=socket), as before shared memory.
`bsp-2servers` shards the model over two server processes (`--servers 2`); `local-4-socket` is
local-4 and `bsp-bf16-socket` the bfloat16 wire on the socket, and "x BSP, same path" compares
each system with the float32 BSP whose values travel the same way.
Batch 32 per process or worker, SGD with momentum 0.9, one torch thread per process, as in
benchmarks/throughput.py, whose loops and steady-window measurement this script reuses
(samples/s over 20%-90% of each run's steps; ratios taken within a repeat, medians of
repeats; the systems' order rotates from repeat to repeat). syncswitch measures its training
path alone, as DDP's loop does: one evaluation at the end, no checkpoint but the final one,
no divergence guard (at 5% evaluation of a 17M model takes more CPU than training on 2 cores).

Each syncswitch run also gets a coarse breakdown from its own records: the steady interval
between applied updates (BSP: one round; ASP and local: the time per applied message), the
workers' mean step time (weights in, forward, backward, gradient out: worker_steps.csv), and
the rest (waiting for the server: transport, copies, the server's apply, the reply). And once
per model, in this process on one thread, what the pieces of a round cost alone:
forward+backward of one batch, flattening the gradient, one message of the model's size over
a loopback TCP socket, copying it into shared memory, the server's FlatSGD step over the flat
vector, and summing one more gradient into a BSP round's sum.

syncswitch's actors keep freed memory in the process (runtime/ray/allocator.py: glibc's malloc
without mmap for large chunks), which makes a step of these models about twice as fast on this
machine. `ddp-kept` is DDP with the same setting in each rank, so that the peer is not
handicapped by an allocator choice; `ddp` is DDP as a user runs it.

    python benchmarks/large_model.py              # mlp17m, 4 workers, 3 repeats
    python benchmarks/large_model.py --model mlp100m --workers 2,4 --repeats 1
    python benchmarks/large_model.py --repeats 1 --epochs 0.1 --out /tmp/lm   # a quick look

With `--link-gbps G` every message crosses an EMULATED link of G Gbit/s per worker, each way
(syncswitch's `--link-gbps`: the server holds a request, and the worker waits for a reply,
for latency + bytes / bandwidth), and DDP's all-reduce crosses the same link (a
communication hook sleeps for the bytes a ring all-reduce moves each way, bucket after bucket,
overlapping backward as DDP does): the figures for workers on other machines than their
servers, where the wire is what costs. The compute stays real.

    python benchmarks/large_model.py --link-gbps 1 --systems ddp,bsp,bsp-bf16,asp,local-4

With `--server-link-gbps S` each server's messages also cross an EMULATED link of S Gbit/s
of its own, which its workers' requests and replies take in turn: what `--servers N`
spreads (`bsp-2servers`, `bsp-4servers`). DDP has no servers; its ring crosses the workers'
links alone.

    python benchmarks/large_model.py --link-gbps 2.5 --server-link-gbps 2.5 \\
        --systems ddp,bsp,bsp-2servers,bsp-4servers

Results: --out (default benchmarks/results/large-model-<model>/, or its link-<G>gbps/,
link-<G>gbps-servers-<S>gbps/):
table-wN.md and runs.jsonl, written as each run ends; run directories and the loops' stamps
under runs/ and raw/.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from harness import (
    RunLog,
    Timing,
    add_links,
    add_out,
    add_repeats,
    cell,
    check_timing,
    comma_list,
    link_folder,
    markdown_table,
    medians,
    ratio,
    save_text,
)
from harness import parser as harness_parser
from steady import read_csv_rows, steady_rate, steady_window
from throughput import LoopJob, free_port, rotated, run_loop, run_syncswitch
from wide_models import mlp17m, mlp100m, parameter_count

from syncswitch.config import TrainConfig
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.wire_dtype import WireDtype
from syncswitch.rundir import names
from syncswitch.runtime.dataplane.shared import WorkerSegment
from syncswitch.workloads import ArrayDataset, load_dataset

MODELS: dict[str, Callable[[], torch.nn.Module]] = {"mlp17m": mlp17m, "mlp100m": mlp100m}
SYSTEMS = (
    "plain",
    "ddp",
    "ddp-kept",
    "bsp",
    "bsp-socket",
    "bsp-bf16",
    "bsp-bf16-socket",
    "bsp-2servers",
    "bsp-4servers",
    "asp",
    "local-4",
    "local-4-socket",
)


class System(NamedTuple):
    """A syncswitch system: its schedule and how its values travel."""

    schedule: str
    wire_dtype: str = "float32"
    shared_memory: bool = True  # False: every value on the loopback socket
    servers: int = 1


SYNCSWITCH = {
    "bsp": System("bsp"),
    "bsp-socket": System("bsp", shared_memory=False),
    "bsp-bf16": System("bsp", "bfloat16"),
    "bsp-bf16-socket": System("bsp", "bfloat16", shared_memory=False),
    "bsp-2servers": System("bsp", servers=2),
    "bsp-4servers": System("bsp", servers=4),
    "asp": System("asp"),
    "local-4": System("local-4"),
    "local-4-socket": System("local-4", shared_memory=False),
}


def same_path_bsp(system: str) -> str | None:
    """The float32 BSP whose values travel as `system`'s do: a protocol's or a wire dtype's gain
    over it is read on one data path (a local phase saves messages and a bfloat16 wire halves
    their bytes, both of which cost more on the socket)."""
    known = SYNCSWITCH.get(system)
    if known is None or system in ("bsp", "bsp-socket"):
        return None
    return "bsp" if known.shared_memory else "bsp-socket"


OUT = Path("benchmarks/results")  # large-model-<model>/
BATCH = 32


# -- one round's pieces, alone -----------------------------------------------------------------


def _median_s(work: Callable[[], object], repeats: int) -> float:
    work()  # warm-up: first-touch page faults, lazy initialisation
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def loopback_message_s(size_bytes: int, repeats: int) -> float:
    """One message of `size_bytes` over a loopback TCP connection: sendall on one thread,
    recv_into a preallocated buffer on this one (the data plane's own calls)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    payload = np.ones(size_bytes, np.uint8)
    into = memoryview(bytearray(size_bytes))

    def one() -> None:
        thread = threading.Thread(target=sender.sendall, args=(payload,))
        thread.start()
        got = 0
        while got < size_bytes:
            got += receiver.recv_into(into[got:], size_bytes - got)
        thread.join()

    try:
        return _median_s(one, repeats)
    finally:
        sender.close()
        receiver.close()


def round_pieces(model_name: str, repeats: int = 5) -> dict[str, float]:
    """Seconds per piece of a round for `model_name`, each alone, on one thread."""
    torch.set_num_threads(1)  # as each Ray worker and the server run
    torch.manual_seed(0)
    model = MODELS[model_name]()
    x = torch.randn(BATCH, 1, 40)
    y = torch.randint(0, 10, (BATCH,))
    params = list(model.parameters())
    count = parameter_count(model)

    def step() -> None:
        for p in params:
            p.grad = None
        F.cross_entropy(model(x), y).backward()

    step()
    flat = torch.empty(count)

    def flatten() -> None:
        torch.cat([p.grad.reshape(-1) for p in params], out=flat)  # type: ignore[union-attr]

    weights = torch.cat([p.detach().reshape(-1) for p in params])
    server = FlatSGD(weights, weight_decay=0.0)
    total = torch.zeros(count)
    segment = WorkerSegment(count, WireDtype.FLOAT32)
    segment.forget()  # mapped here until this returns; no name left behind
    shared = torch.from_numpy(segment.regions.request)
    return {
        "forward_backward_s": _median_s(step, repeats),
        "flatten_gradient_s": _median_s(flatten, repeats),
        "loopback_message_s": loopback_message_s(count * 4, repeats),
        "shared_memory_copy_s": _median_s(lambda: shared.copy_(flat), repeats),
        "server_step_s": _median_s(lambda: server.step(flat, lr=0.01, momentum=0.9), repeats),
        "sum_one_gradient_s": _median_s(lambda: total.add_(flat), repeats),
        "parameters": float(count),
    }


# -- syncswitch's own breakdown ------------------------------------------------------------------


def steady_samples_per_s(rows: list[dict[str, str]]) -> float:
    """Samples/s in the steady window from updates.csv, whose `samples` column is the run's
    total after each update (a local phase's message stands for H steps' samples, so rows x
    batch would undercount it H times)."""
    stamped = sorted((float(r["time_s"]), int(r["samples"])) for r in rows)
    start, end = steady_window([t for t, _ in stamped])

    def total_by(moment: float) -> int:
        return max((n for t, n in stamped if t < moment), default=0)

    return (total_by(end) - total_by(start)) / (end - start)


def breakdown(run_dir: Path) -> dict[str, float | None]:
    """From a finished run's files: samples/s, the steady interval between applied updates
    (versions), and the workers' mean step and mean wait for the server's reply."""
    rows = read_csv_rows(run_dir / names.UPDATES)
    versions = sorted({float(r["time_s"]) for r in rows})
    workers = read_csv_rows(run_dir / names.WORKER_STEPS)

    def mean_of(column: str) -> float | None:
        values = [float(r[column]) for r in workers if r.get(column)]
        return statistics.mean(values) if values else None

    return {
        "samples_per_s": steady_samples_per_s(rows),
        "interval_s": 1.0 / steady_rate(versions) if len(versions) > 4 else None,
        "worker_step_s": mean_of("step_time_mean_s"),
        "worker_wait_s": mean_of("wait_mean_s"),
    }


# -- the script -----------------------------------------------------------------------------------


def table(bench: Bench, workers: int, repeats: list[dict], pieces: dict[str, float]) -> str:
    rates = medians(r["samples_per_s"] for r in repeats)
    loads = ", ".join(f"{r['load']:.1f}" for r in repeats)
    timing = (
        f"EMULATED link of {bench.link_gbps:g} Gbit/s per worker each way and "
        f"{bench.link_latency_ms:g} ms per message (sleeps), real compute"
        if bench.link_gbps
        else "No emulation, real compute"
    )
    if bench.server_link_gbps:
        timing += (
            f"; an EMULATED link of {bench.server_link_gbps:g} Gbit/s per server each way, "
            "its workers' messages in turn"
        )
    head = (
        f"**{timing}, {workers} processes on a {os.cpu_count()}-core shared "
        f"machine.** MNIST-1D, {bench.model} ({pieces['parameters'] / 1e6:.1f}M parameters), "
        f"batch {BATCH} per process, one torch thread each; samples/s over the steady window; "
        f"medians of {len(repeats)} repeat(s), ratios taken within a repeat; load average "
        f"{loads} at each repeat's end.\n\n"
    )
    check_timing(head, Timing.EMULATED if bench.emulated else Timing.REAL)
    rows = []
    ran = [s for s in SYSTEMS if any(s in r["samples_per_s"] for r in repeats)]
    for system in ran:
        rate = [r["samples_per_s"] for r in repeats]

        def within(peer: str, system: str = system, rate: list = rate) -> float | None:
            known = [v for v in (ratio(r.get(system), r.get(peer)) for r in rate) if v]
            return statistics.median(known) if known else None

        split = medians(r["breakdown"].get(system, {}) for r in repeats)
        rows.append(
            (
                system,
                cell(rates.get(system), ",.0f"),
                cell(within("ddp"), ".2f"),
                cell(within("ddp-kept"), ".2f"),
                cell((peer := same_path_bsp(system)) and within(peer), ".2f"),
                cell(split.get("interval_s") and split["interval_s"] * 1e3, ".0f"),
                cell(split.get("worker_step_s") and split["worker_step_s"] * 1e3, ".0f"),
                cell(split.get("worker_wait_s") and split["worker_wait_s"] * 1e3, ".0f"),
            )
        )
    columns = (
        "system",
        "samples/s",
        "x DDP",
        "x DDP-kept",
        "x BSP, same path",
        "ms per update",
        "ms worker step",
        "ms wait",
    )
    piece_rows = [(k, cell(v * 1e3, ".1f")) for k, v in pieces.items() if k.endswith("_s")]
    return (
        head
        + "\n".join(markdown_table(columns, rows))
        + "\n\nOne round's pieces alone (ms, one thread, median of 5):\n\n"
        + "\n".join(markdown_table(("piece", "ms"), piece_rows))
        + "\n"
    )


@dataclass(frozen=True)
class Bench:
    """What every run of one invocation shares."""

    model: str  # a key of MODELS
    epochs: float
    out: Path
    dataset: ArrayDataset
    link_gbps: float = 0.0  # an EMULATED link for every system's messages; 0: none
    link_latency_ms: float = 0.0
    server_link_gbps: float = 0.0  # an EMULATED link of each server's own; 0: none

    @property
    def emulated(self) -> bool:
        return bool(self.link_gbps or self.server_link_gbps)

    @property
    def model_path(self) -> str:
        return f"wide_models:{self.model}"


def run_syncswitch_system(bench: Bench, system: str, workers: int, seed: int) -> dict:
    """One syncswitch run of `system`, measured from its own files."""
    schedule, wire_dtype, shared_memory, servers = SYNCSWITCH[system]
    run_dir = bench.out / "runs" / f"{system}-w{workers}-s{seed}"
    config = TrainConfig(
        workers=workers,
        batch_size=BATCH,
        schedule=schedule,
        wire_dtype=wire_dtype,
        servers=servers,
        epochs=bench.epochs,
        seed=seed,
        model=bench.model_path,
        progress=False,
        out=str(run_dir),
        # The training path alone, as DDP's loop: one evaluation at the end, the final
        # checkpoint only, no loss watch (it needs them).
        eval_every=1.0,
        checkpoint_every=0.0,
        divergence_guard=False,
        link_gbps=bench.link_gbps,
        link_latency_ms=bench.link_latency_ms,
        server_link_gbps=bench.server_link_gbps,
    )
    # The driver passes the choice to its workers (runtime/dataplane/shared.py).
    os.environ["SYNCSWITCH_DATAPLANE"] = "shared" if shared_memory else "socket"
    try:
        run = run_syncswitch(config)
    finally:
        os.environ.pop("SYNCSWITCH_DATAPLANE")
    split = breakdown(run_dir)
    run["samples_per_s"] = split.pop("samples_per_s")
    run["breakdown"] = split
    return run


def run_loop_system(bench: Bench, system: str, workers: int, seed: int) -> dict:
    """One plain or DDP loop (throughput.py's) on the same model and batch."""
    defaults = TrainConfig(progress=False)
    world = 1 if system == "plain" else workers
    job = LoopJob(
        dataset=bench.dataset,
        world=world,
        ddp=system != "plain",
        batch_size=BATCH,
        steps=max(20, int(bench.epochs * len(bench.dataset.y_train)) // (BATCH * world)),
        lr=defaults.lr * world / workers,  # linear scaling, as throughput.py
        momentum=defaults.momentum,
        seed=seed,
        threads=1,
        port=free_port(),
        raw_dir=str(bench.out / "raw" / f"{system}-w{workers}-s{seed}"),
        model=bench.model_path,
        keep_freed_memory=system == "ddp-kept",
        link_gbps=bench.link_gbps,
        link_latency_ms=bench.link_latency_ms,
    )
    return run_loop(job)


def measure(bench: Bench, system: str, workers: int, seed: int) -> dict:
    """One system's run; a failure is recorded, not raised (the others' figures stay)."""
    started = time.monotonic()
    try:
        if system in SYNCSWITCH:
            run = run_syncswitch_system(bench, system, workers, seed)
        else:
            run = run_loop_system(bench, system, workers, seed)
    except Exception as error:
        run = {"error": f"{type(error).__name__}: {error}"}
    run["elapsed_s"] = time.monotonic() - started
    return run


def main() -> None:
    cli = harness_parser(__doc__, epilog=True)
    cli.add_argument("--model", choices=sorted(MODELS), default="mlp17m")
    cli.add_argument("--workers", default="4", help="comma-separated worker counts (default 4)")
    cli.add_argument(
        "--epochs",
        type=float,
        default=0.5,
        help="passes over the 8,000 training samples per system (default 0.5: 4,000 samples, "
        "10-30 s per system with mlp17m on the 2-core machine)",
    )
    cli.add_argument("--systems", default=",".join(SYSTEMS), help="which systems to run")
    add_links(cli, "every system's")
    add_repeats(cli, 3, "rounds of all systems")
    add_out(cli, None, "(default benchmarks/results/large-model-<model>)")
    args = cli.parse_args()
    out = args.out or link_folder(OUT / f"large-model-{args.model}", args)
    out.mkdir(parents=True, exist_ok=True)
    systems = [s for s in SYSTEMS if s in comma_list(args.systems)]
    # Ray's workers import the model's module by name: put this folder on their path.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, here)
    print("measuring one round's pieces alone ...", flush=True)
    pieces = round_pieces(args.model)
    print({k: round(v * 1e3, 1) for k, v in pieces.items() if k.endswith("_s")}, flush=True)
    dataset = load_dataset("mnist1d", mnist1d_samples=TrainConfig().mnist1d_samples)
    bench = Bench(
        model=args.model,
        epochs=args.epochs,
        out=out,
        dataset=dataset,
        link_gbps=args.link_gbps,
        link_latency_ms=args.link_latency_ms if args.link_gbps else 0.0,
        server_link_gbps=args.server_link_gbps,
    )
    log = RunLog(out / "runs.jsonl")
    if set(SYNCSWITCH) & set(systems):
        from syncswitch.runtime.ray.connect import start_local

        # A CPU per worker, server and the evaluator, and some to spare.
        servers = max(SYNCSWITCH[s].servers for s in systems if s in SYNCSWITCH)
        start_local(max(comma_list(args.workers, int)) + servers + 3)
    for workers in comma_list(args.workers, int):
        repeats: list[dict] = []
        for seed in range(args.repeats):
            repeat: dict = {"seed": seed, "samples_per_s": {}, "breakdown": {}}
            for system in rotated(systems, seed):
                run = measure(bench, system, workers, seed)
                repeat["samples_per_s"][system] = run.get("samples_per_s")
                if "breakdown" in run:
                    repeat["breakdown"][system] = run["breakdown"]
                log.append({"model": args.model, "workers": workers, "seed": seed,
                            "system": system, **run})  # fmt: skip
                failed = f"  FAILED: {run['error']}" if "error" in run else ""
                rate = cell(run.get("samples_per_s"), ",.0f")
                where = f"{args.model} w{workers} s{seed} {system}"
                print(f"{where}: {rate} samples/s{failed}", flush=True)
            repeat["load"] = os.getloadavg()[0]
            repeats.append(repeat)
            text = table(bench, workers, repeats, pieces)
            save_text(out / f"table-w{workers}.md", text)
        print(text, flush=True)


if __name__ == "__main__":
    main()
