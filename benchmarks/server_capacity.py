"""How many updates/s one parameter server keeps up with, and its CPU per applied gradient.

The real `ParameterServer` (its `ServerShard` and its data-plane endpoint) runs in this
process without Ray; client processes send it precomputed ASP gradients over the data plane
as fast as it answers (no forward/backward: only the server is measured). The main thread
drains the shard every 0.1 s, as the Ray supervisor does. Over a steady window it reads this
process's CPU time (every thread: the data plane's and the drains) and the
number of applied gradients. On this 2-core machine the clients share the cores with the
server, so the rate is a lower bound of what the server alone sustains; the CPU per gradient
is the server's own cost, and 1000 / that is the rate one core of server would sustain.

    python benchmarks/server_capacity.py                  # cnn1d and ResNet-20 sizes
    python benchmarks/server_capacity.py --clients 2,4 --window-s 5

Results: --out (default benchmarks/results/server-capacity/): table.md and runs.json,
rewritten after every measurement.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np
import torch
from harness import (
    Timing,
    add_out,
    add_repeats,
    args_record,
    check_timing,
    comma_list,
    markdown_table,
    medians,
    parser,
    save_json,
    save_text,
)

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.server_optimizer import OptimizerConfig
from syncswitch.runtime.dataplane import WorkerChannel, encode_request
from syncswitch.runtime.ray.server import ParameterServer
from syncswitch.runtime.shards import ShardSpec
from syncswitch.workloads.models import Cnn1d, resnet20

SIZES = {"cnn1d": Cnn1d, "resnet20": resnet20}  # the reference job's model; ResNet-20
BATCH = 32


def parameter_count(name: str) -> int:
    return sum(p.numel() for p in SIZES[name]().parameters())


def client(address: str, token: bytes, worker: int, numel: int, stop) -> None:
    channel = WorkerChannel([(address, token)], probe=lambda: True)
    gradient = np.random.default_rng(worker).normal(0, 1e-4, numel).astype(np.float32)
    version, sequence = 0, 0
    while not stop.is_set():
        header = encode_request(worker, 0, sequence, version, BATCH, 1.0, 0.001, None)
        [reply] = channel.exchange([(header, gradient)])
        version, sequence = reply.version, sequence + 1
        if reply.done:
            break
    channel.close()


def measure(numel: int, clients: int, warmup_s: float, window_s: float) -> dict:
    torch.set_num_threads(1)  # as the server actor is started
    config = SyncConfig(
        optimizer=OptimizerConfig(weight_decay=5e-4),
        workers=clients,
        total_samples=10**9,  # never done within the measurement
        schedule=Schedule.single(ASP),
        lr=0.01,
        momentum=0.9,
    )
    initial = np.zeros(numel, dtype=np.float32)
    server = ParameterServer(ShardSpec(config, initial), host="127.0.0.1")
    server.begin()
    for worker in range(clients):
        server.admit(worker, 0)  # rejoin less the weights reply, which is Ray's
    address, token = server.endpoint()
    context = mp.get_context("spawn")  # this process already runs threads: never fork it
    stop = context.Event()
    processes = [
        context.Process(target=client, args=(address, token, w, numel, stop))
        for w in range(clients)
    ]
    for process in processes:
        process.start()
    deadline = time.time() + 120
    while server.shard.sync.live.version < 10 * clients:  # every client started (imports take s)
        if time.time() > deadline:
            raise RuntimeError("the clients did not start within 120 s")
        time.sleep(0.1)
        server.drain()
    window_started = time.time() + warmup_s
    marks: list[tuple[float, float, int]] = []
    while time.time() < window_started + window_s:
        time.sleep(0.1)
        server.drain()
        now = time.time()
        if now >= window_started and (not marks or now >= window_started + window_s - 0.1):
            marks.append((now, time.process_time(), server.shard.sync.live.version))
    stop.set()
    for process in processes:
        process.join(timeout=30)
    server.close()
    (t0, cpu0, v0), (t1, cpu1, v1) = marks[0], marks[-1]
    applied = v1 - v0
    return {
        "updates_per_s": applied / (t1 - t0),
        "server_cpu_ms_per_gradient": 1000 * (cpu1 - cpu0) / applied,
        "server_cores_busy": (cpu1 - cpu0) / (t1 - t0),
        "applied_in_window": applied,
    }


def table(results: dict, args: argparse.Namespace) -> str:
    title = (
        f"One ParameterServer (shard + data plane, no Ray), ASP, precomputed gradients sent by "
        f"client processes as fast as it answers; {args.window_s:g} s window after "
        f"{args.warmup_s:g} s; medians of {args.repeats} repeat(s); {os.cpu_count()} cores "
        "shared by the server and its clients. No emulation: real timing."
    )
    columns = ("parameters", "clients", "updates/s", "server CPU ms per gradient")
    columns += ("server cores busy", "1 core of server sustains (updates/s)")
    cells = []
    for key, runs in results.items():
        size, clients = key.split("/")
        med = medians(runs["runs"])
        cells.append(
            (
                f"{runs['numel']:,} ({size})",
                clients,
                f"{med['updates_per_s']:,.0f}",
                f"{med['server_cpu_ms_per_gradient']:.3f}",
                f"{med['server_cores_busy']:.2f}",
                f"{1000 / med['server_cpu_ms_per_gradient']:,.0f}",
            )
        )
    lines = [check_timing(title, Timing.REAL), "", *markdown_table(columns, cells)]
    return "\n".join(lines) + "\n"


def main() -> None:
    cli = parser(__doc__, epilog=True)
    cli.add_argument("--sizes", default="cnn1d,resnet20", help="models whose size to use")
    cli.add_argument("--clients", default="4", help="comma-separated client counts")
    add_repeats(cli, 3)
    cli.add_argument("--warmup-s", type=float, default=2.0)
    cli.add_argument("--window-s", type=float, default=8.0)
    add_out(cli, "benchmarks/results/server-capacity")
    args = cli.parse_args()
    out = args.out
    results: dict[str, dict] = {}
    for repeat in range(args.repeats):
        for size in comma_list(args.sizes):
            numel = parameter_count(size)
            for clients in comma_list(args.clients, int):
                row = measure(numel, clients, args.warmup_s, args.window_s)
                entry = results.setdefault(f"{size}/{clients}", {"numel": numel, "runs": []})
                entry["runs"].append(row)
                print(
                    f"repeat {repeat + 1}, {size} ({numel:,}), {clients} clients: "
                    f"{row['updates_per_s']:,.0f} updates/s, "
                    f"{row['server_cpu_ms_per_gradient']:.3f} ms server CPU per gradient",
                    flush=True,
                )
                record = {"args": args_record(args), "results": results}
                save_json(out / "runs.json", record, indent=2)
                save_text(out / "table.md", table(results, args))
    print("\n" + table(results, args))


if __name__ == "__main__":
    main()
