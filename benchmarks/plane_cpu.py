"""The server's CPU per data-plane message: an ASP gradient, a BSP gradient, a local-H delta.

Issue 22's third goal: the data plane's CPU per message stays within 10% of ASP's (a delta is
a float32 vector of the model's size, as a gradient is). As in server_capacity.py, the real
`ParameterServer` (its `ServerShard` and its data-plane endpoint) runs in this process
without Ray, and client processes send it precomputed messages over the data plane as fast
as it answers (no forward/backward: only the server is measured); the main thread drains the
shard every 0.1 s, as the Ray supervisor does. The cases differ only in the schedule and in
what the clients send:

- asp: gradients (`local_steps` 0), no barrier: every message is applied and answered alone;
- bsp: gradients at BSP's barrier: a round of one message per client, one update;
- local-H: deltas (`local_steps` H, H x 32 samples) at the same barrier, one outer step per
  round (plain averaging); each reply carries the worker's next round.
- asp-adamw: asp with the server stepping AdamW instead of momentum SGD (issue 33's goal:
  Adam's server CPU per applied gradient at most 1.5x SGD's).

Over a steady window it reads CPU time (not wall), split three ways:

- data plane: the data-plane thread's CPU (`pthread_getcpuclockid`) less what it spent in the
  two parts timed below: receiving, checking and decoding the message, handing it to the
  shard (the Gradient record, the lock, the waiters) and sending the reply;
- reply snapshot: `ReplyCache.current`, the copy of the weights (and the reply header)
  replies share, made once per version: per message under ASP, once per round at a barrier;
- synchronizer: `ServerShard.submit` (admission, the ledger, the update or the barrier's
  weighted sum and step, the records);
- whole server: this process's CPU (every thread: the data plane's and the drains), per
  message; and this process's minor page faults per message (first touches of memory the
  allocator had handed back to the kernel).

Every repeat measures every case and size in turn (the order rotating between repeats), with
one pool of client processes kept across them; the table gives medians over repeats and the
medians of the per-repeat ratios to ASP (and, for local-H, to BSP, the same barrier). The
1-minute load average is read at each window's ends: the clients share the machine's cores
with the server (and with whatever else runs), which slows the rate but not, to first order,
the CPU per message.

    python benchmarks/plane_cpu.py                        # cnn1d and ResNet-20 sizes
    python benchmarks/plane_cpu.py --sizes cnn1d --repeats 3 --window-s 2
    python benchmarks/plane_cpu.py --wire-dtype bfloat16  # issue 34: 16-bit messages

Results: --out (default benchmarks/results/plane-cpu/): runs.jsonl (one line per
measurement, as it ends) and table.md, rewritten after every measurement.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from harness import (
    RunLog,
    Timing,
    add_out,
    add_repeats,
    args_record,
    cell,
    check_timing,
    comma_list,
    markdown_table,
    medians,
    parser,
    ratio,
    save_json,
    save_text,
)
from server_capacity import BATCH, parameter_count

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.sync.server_optimizer import OptimizerConfig, OptimizerKind
from syncswitch.core.sync.wire_dtype import WireDtype, encode
from syncswitch.runtime.dataplane import WorkerChannel, encode_request
from syncswitch.runtime.ray.server import ParameterServer
from syncswitch.runtime.shards import ShardSpec

PARTS = ("data_plane_us", "snapshot_us", "synchronizer_us", "whole_server_us")


def cases(local_steps: int) -> dict[str, tuple[str, int, OptimizerKind]]:
    """Case name -> (the server's schedule, the local_steps the clients' messages carry, the
    server's optimizer)."""
    local = f"local-{local_steps}"
    sgd = OptimizerKind.SGD
    return {
        "asp": ("asp", 0, sgd),
        "bsp": ("bsp", 0, sgd),
        local: (local, local_steps, sgd),
        "asp-adamw": ("asp", 0, OptimizerKind.ADAMW),  # issue 33: Adam's cost per gradient
    }


# -- the clients (separate processes, kept across measurements) -------------------------------


def client(worker: int, jobs: Any, finished: Any) -> None:
    """Take jobs (address, token, numel, local_steps, wire dtype) until None; for each, send
    messages as fast as they are answered until the server closes the connection."""
    while (job := jobs.get()) is not None:
        address, token, numel, local_steps, dtype = job
        values = np.random.default_rng(worker).normal(0, 1e-4, numel).astype(np.float32)
        values = encode(values, WireDtype(dtype))  # as a worker sends it
        sent = 0
        channel: WorkerChannel | None = None
        try:
            channel = WorkerChannel(
                [(address, token)], probe=lambda: True, wire_dtype=WireDtype(dtype)
            )
            version, steps = 0, local_steps
            while True:
                samples = BATCH * max(steps, 1)
                header = encode_request(worker, 0, sent, version, samples, 1.0, 1e-3, None, steps)
                [reply] = channel.exchange([(header, values)])
                sent += 1
                version = reply.version
                # The next round's H, as a worker takes it from the reply (ASP, BSP: 0).
                steps = reply.local.steps if reply.local is not None else 0
        except (ConnectionError, OSError):
            pass  # the measurement ended: the server closed its end
        finally:
            if channel is not None:
                channel.close()
            finished.put((worker, sent))


@dataclass
class Pool:
    processes: list[Any]
    jobs: list[Any]
    finished: Any

    @classmethod
    def start(cls, clients: int) -> Pool:
        context = mp.get_context("spawn")  # this process runs threads: never fork it
        jobs = [context.Queue() for _ in range(clients)]
        finished = context.Queue()
        processes = [
            context.Process(target=client, args=(w, jobs[w], finished), daemon=True)
            for w in range(clients)
        ]
        for process in processes:
            process.start()
        return cls(processes, jobs, finished)

    def run(
        self, address: str, token: bytes, numel: int, local_steps: int, dtype: WireDtype
    ) -> None:
        for queue in self.jobs:
            queue.put((address, token, numel, local_steps, dtype.value))

    def wait(self, timeout_s: float = 60) -> None:
        for _ in self.jobs:
            self.finished.get(timeout=timeout_s)

    def stop(self) -> None:
        for queue in self.jobs:
            queue.put(None)
        for process in self.processes:
            process.join(timeout=10)


# -- the server's CPU, split ------------------------------------------------------------------


class CpuTimed:
    """Wraps a method so the calling thread's CPU inside it is summed (and its calls counted)."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.cpu_ns = 0
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.thread_time_ns()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.cpu_ns += time.thread_time_ns() - started
            self.calls += 1


@dataclass(frozen=True)
class Mark:
    """What is read at one end of the window."""

    wall_s: float
    process_cpu_ns: int
    plane_thread_cpu_ns: int
    submit_cpu_ns: int
    snapshot_cpu_ns: int
    messages: int
    load_1m: float
    minor_faults: int = 0  # this process's minor page faults (first touches of new memory)


def per_message(start: Mark, end: Mark) -> dict[str, float]:
    """The window's figures: messages/s and microseconds of CPU per message, by part."""
    messages = end.messages - start.messages
    if messages <= 0:
        raise ValueError("no message arrived in the window")

    def us(field: str) -> float:
        return (getattr(end, field) - getattr(start, field)) / 1000 / messages

    submit, snapshot = us("submit_cpu_ns"), us("snapshot_cpu_ns")
    return {
        "messages": messages,
        "messages_per_s": messages / (end.wall_s - start.wall_s),
        "data_plane_us": us("plane_thread_cpu_ns") - submit - snapshot,
        "snapshot_us": snapshot,
        "synchronizer_us": submit,
        "whole_server_us": us("process_cpu_ns"),
        "load_1m": max(start.load_1m, end.load_1m),
        "faults_per_message": (end.minor_faults - start.minor_faults) / messages,
    }


def measure(
    pool: Pool,
    schedule: str,
    local_steps: int,
    optimizer: OptimizerKind,
    numel: int,
    warmup_s: float,
    window_s: float,
    wire_dtype: WireDtype = WireDtype.FLOAT32,
) -> dict[str, float]:
    torch.set_num_threads(1)  # as the server actor is started
    clients = len(pool.jobs)
    config = SyncConfig(
        optimizer=OptimizerConfig(optimizer, weight_decay=5e-4),
        workers=clients,
        total_samples=10**12,  # never done within the measurement
        schedule=Schedule.parse(schedule),
        lr=0.01,
        momentum=0.9,
        wire_dtype=wire_dtype,
    )
    server = ParameterServer(ShardSpec(config, np.zeros(numel, dtype=np.float32)), host="127.0.0.1")
    submit = CpuTimed(server.shard.submit)
    snapshot = CpuTimed(server._replies.current)
    server.shard.submit = submit  # type: ignore[method-assign]
    server._replies.current = snapshot  # type: ignore[method-assign]
    thread = server._endpoint._thread
    assert thread.ident is not None
    plane_clock = time.pthread_getcpuclockid(thread.ident)
    server.begin()
    for worker in range(clients):
        server.admit(worker, 0)  # rejoin less the weights reply, which is Ray's
    pool.run(*server.endpoint(), numel, local_steps, wire_dtype)

    def mark() -> Mark:
        with server._lock:  # the counters and the thread's CPU at one moment
            return Mark(
                time.monotonic(),
                time.process_time_ns(),
                time.clock_gettime_ns(plane_clock),
                submit.cpu_ns,
                snapshot.cpu_ns,
                submit.calls,
                os.getloadavg()[0],
                resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
            )

    try:
        deadline = time.monotonic() + 60
        while submit.calls < 20 * clients:  # every client connected and going
            if time.monotonic() > deadline:
                raise RuntimeError("the clients did not start within 60 s")
            time.sleep(0.1)
            server.drain()
        _drain_for(server, warmup_s)
        start = mark()
        _drain_for(server, window_s)
        end = mark()
    finally:
        server.close()  # the clients' connections close: each ends its job
        pool.wait()
    return per_message(start, end)


def _drain_for(server: ParameterServer, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        time.sleep(0.1)
        server.drain()


# -- the table --------------------------------------------------------------------------------


def summarise(rows: list[dict[str, Any]], local_case: str) -> list[dict[str, Any]]:
    """Per (size, case): medians over repeats of each figure, and the medians of the
    per-repeat ratios to ASP's (and for the local case, BSP's) figure of the same repeat."""
    by_key: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault((row["size"], row["repeat"]), {})[row["case"]] = row
    sizes = list(dict.fromkeys(row["size"] for row in rows))
    names = list(dict.fromkeys(row["case"] for row in rows))
    out = []
    for size in sizes:
        repeats = [v for (s, _), v in by_key.items() if s == size]
        for case in names:
            mine = [r[case] for r in repeats if case in r]
            if not mine:
                continue
            summary: dict[str, Any] = {
                "size": size,
                "numel": mine[0]["numel"],
                "case": case,
                "repeats": len(mine),
            }
            keys = ("messages_per_s", *PARTS, "faults_per_message")
            summary.update(medians({key: r.get(key) for key in keys} for r in mine))
            summary["load_1m"] = (min(r["load_1m"] for r in mine), max(r["load_1m"] for r in mine))
            for base in ("asp", "bsp") if case == local_case else ("asp",):
                paired = [r for r in repeats if case in r and base in r]
                summary.update(
                    medians(
                        {f"{key}/{base}": ratio(r[case][key], r[base][key]) for key in PARTS}
                        for r in paired
                    )
                )
                for key in PARTS:
                    summary.setdefault(f"{key}/{base}", None)
            out.append(summary)
    return out


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    local_case = f"local-{args.local_steps}"
    title = (
        f"Server CPU per data-plane message (this process's thread and process CPU time, not "
        f"wall), one ParameterServer (shard + data plane, no Ray), {args.clients} client "
        f"processes sending precomputed messages as fast as it answers; {args.window_s:g} s "
        f"window after {args.warmup_s:g} s; medians of {args.repeats} interleaved repeat(s) "
        f"(ratios: medians of the per-repeat ratios); messages' values as "
        f"{args.wire_dtype}; {os.cpu_count()} cores shared by the "
        "server, its clients and other work. No emulation: real timing, microseconds."
    )
    columns = (
        "model",
        "case",
        "messages/s",
        "data plane (recv+decode+hand-off+send)",
        "reply snapshot",
        "synchronizer (submit)",
        "whole server (process)",
        "data plane vs ASP",
        "whole server vs ASP",
        "synchronizer vs ASP",
        "vs BSP: data plane / synchronizer / whole",
        "page faults",
        "load (1 min)",
    )
    cells = []
    for s in summarise(rows, local_case):
        vs_bsp = "-"
        if s["case"] == local_case:
            vs_bsp = " / ".join(
                cell(s.get(f"{k}/bsp"), ".2f")
                for k in ("data_plane_us", "synchronizer_us", "whole_server_us")
            )
        cells.append(
            (
                f"{s['size']} ({s['numel']:,})",
                s["case"],
                f"{s['messages_per_s']:,.0f}",
                f"{s['data_plane_us']:.1f}",
                f"{s['snapshot_us']:.1f}",
                f"{s['synchronizer_us']:.1f}",
                f"{s['whole_server_us']:.1f}",
                cell(s.get("data_plane_us/asp"), ".2f"),
                cell(s.get("whole_server_us/asp"), ".2f"),
                cell(s.get("synchronizer_us/asp"), ".2f"),
                vs_bsp,
                cell(s.get("faults_per_message"), ".1f"),
                f"{s['load_1m'][0]:.1f}-{s['load_1m'][1]:.1f}",
            )
        )
    lines = [check_timing(title, Timing.REAL), "", *markdown_table(columns, cells)]
    return "\n".join(lines) + "\n"


def main() -> None:
    cli = parser(__doc__, epilog=True)
    cli.add_argument("--sizes", default="cnn1d,resnet20", help="models whose size to use")
    cli.add_argument("--clients", type=int, default=4, help="client processes (default 4)")
    cli.add_argument("--local-steps", type=int, default=16, help="H of the local case")
    cli.add_argument(
        "--wire-dtype",
        default="float32",
        choices=[d.value for d in WireDtype],
        help="what messages' values travel as (every case)",
    )
    add_repeats(cli, 5, "repeats of every case and size")
    cli.add_argument("--warmup-s", type=float, default=1.0)
    cli.add_argument("--window-s", type=float, default=3.0)
    add_out(cli, "benchmarks/results/plane-cpu")
    args = cli.parse_args()
    log = RunLog(args.out / "runs.jsonl")
    log.clear()
    save_json(args.out / "args.json", args_record(args))
    pool = Pool.start(args.clients)
    rows: list[dict[str, Any]] = []
    order = list(cases(args.local_steps).items())
    wire = WireDtype(args.wire_dtype)
    try:
        for repeat in range(args.repeats):
            turn = order[repeat % len(order) :] + order[: repeat % len(order)]
            for size in comma_list(args.sizes):
                numel = parameter_count(size)
                for case, (schedule, steps, kind) in turn:
                    row = measure(
                        pool, schedule, steps, kind, numel, args.warmup_s, args.window_s, wire
                    )
                    row.update(
                        repeat=repeat, size=size, numel=numel, case=case, wire=args.wire_dtype
                    )
                    rows.append(row)
                    log.append(row)
                    print(
                        f"repeat {repeat + 1}, {size}, {case}: {row['messages_per_s']:,.0f}/s, "
                        f"data plane {row['data_plane_us']:.1f} us, synchronizer "
                        f"{row['synchronizer_us']:.1f} us, whole {row['whole_server_us']:.1f} "
                        f"us per message, {row['faults_per_message']:.1f} page faults (load "
                        f"{row['load_1m']:.1f})",
                        flush=True,
                    )
                    save_text(args.out / "table.md", table(rows, args))
    finally:
        pool.stop()
    print("\n" + table(rows, args))


if __name__ == "__main__":
    main()
