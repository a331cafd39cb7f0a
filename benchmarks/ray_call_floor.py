"""The transport's floor on this machine: n clients sending a do-nothing server one message
per step, as a Ray actor call or over `syncswitch`'s ZeroMQ data plane.

Each client "computes" for the emulated step time and sends a gradient-sized array, held by
the server until the step ends (as `syncswitch` does under emulation), then waits for a
weights-sized reply. The server does no work, so the update rate reached here is the best a
parameter server on that transport can reach on this machine, and the CPU per message is what
the transport alone costs. This is the measurement that chose the data plane
(docs/performance.md). Runs of the three kinds are interleaved, so noise hits all alike.

    python benchmarks/ray_call_floor.py --workers 8 --step-time-ms 20 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time

import numpy as np
import ray

from syncswitch.runtime.dataplane import (
    Request,
    ServerEndpoint,
    WorkerChannel,
    encode_reply,
    encode_request,
)
from syncswitch.runtime.ray_setup import start_local


@ray.remote(num_cpus=1)
class AsyncEchoServer:
    def __init__(self, size: int) -> None:
        self.weights = np.zeros(size, np.float32)

    async def push_pull(self, ready_at: float, gradient: np.ndarray) -> np.ndarray:
        delay_s = ready_at - time.time()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        return self.weights.copy()

    async def cpu_s(self) -> float:
        return time.process_time()


@ray.remote(num_cpus=1)
class ThreadedEchoServer:
    def __init__(self, size: int) -> None:
        self.weights = np.zeros(size, np.float32)
        self.lock = threading.Lock()

    def push_pull(self, ready_at: float, gradient: np.ndarray) -> np.ndarray:
        delay_s = ready_at - time.time()
        if delay_s > 0:
            time.sleep(delay_s)
        with self.lock:
            return self.weights.copy()

    def cpu_s(self) -> float:
        return time.process_time()


@ray.remote(num_cpus=1)
class DataPlaneEchoServer:
    """The data plane's server end with a handler that only answers (no shard behind it)."""

    def __init__(self, size: int) -> None:
        self.weights = np.zeros(size, np.float32)
        self.header = encode_reply(0, False, 0.0)
        self.endpoint = ServerEndpoint(
            ray.util.get_node_ip_address(), size, self._answer, clock=time.time
        )

    def _answer(self, identity: bytes, request: Request) -> None:
        self.endpoint.send(identity, self.header, self.weights)

    def address(self) -> tuple[str, bytes]:
        return self.endpoint.address, self.endpoint.token

    def cpu_s(self) -> float:
        return time.process_time()


@ray.remote(num_cpus=1)
class DataPlaneClient:
    def run(self, server, steps: int, step_s: float, size: int) -> float:
        gradient = np.zeros(size, np.float32)
        channel = WorkerChannel([ray.get(server.address.remote())], probe=lambda: None)
        started = time.process_time()
        for sequence in range(steps):
            header = encode_request(0, 0, sequence, 0, 32, 0.0, step_s, time.time() + step_s)
            channel.exchange([(header, gradient)])
        cpu_s = time.process_time() - started
        channel.close()
        return cpu_s


@ray.remote(num_cpus=1)
class Client:
    def run(self, server, steps: int, step_s: float, size: int) -> float:
        gradient = np.zeros(size, np.float32)
        started = time.process_time()
        for _ in range(steps):
            ray.get(server.push_pull.remote(time.time() + step_s, gradient))
        return time.process_time() - started


def measure(server_cls, client_cls, args) -> dict:
    server = server_cls.options(max_concurrency=4 * args.workers + 16).remote(args.parameters)
    clients = [client_cls.remote() for _ in range(args.workers)]
    step_s = args.step_time_ms / 1000
    ray.get([c.run.remote(server, 10, 0.0, args.parameters) for c in clients])  # warm up
    cpu0 = ray.get(server.cpu_s.remote())
    started = time.perf_counter()
    client_cpu = ray.get(
        [c.run.remote(server, args.steps, step_s, args.parameters) for c in clients]
    )
    elapsed = time.perf_counter() - started
    server_cpu = ray.get(server.cpu_s.remote()) - cpu0
    calls = args.steps * args.workers
    for actor in [server, *clients]:
        ray.kill(actor)
    return {
        "efficiency": calls / elapsed / (args.workers / step_s),
        "client_cpu_ms": 1000 * statistics.mean(client_cpu) / args.steps,
        "server_cpu_ms": 1000 * server_cpu / calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--step-time-ms", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=300, help="calls per client")
    parser.add_argument("--parameters", type=int, default=5210, help="floats per message")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    start_local(args.workers + 4)
    print(
        f"{args.workers} clients, {args.step_time_ms:g} ms emulated step, "
        f"{args.parameters} float32 per message; medians of {args.repeats} runs\n"
    )
    kinds = {
        "Ray call, asyncio actor": (AsyncEchoServer, Client),
        "Ray call, threaded actor": (ThreadedEchoServer, Client),
        "ZeroMQ data plane": (DataPlaneEchoServer, DataPlaneClient),
    }
    runs: dict[str, list[dict]] = {name: [] for name in kinds}
    for repeat in range(args.repeats):
        for name, (server_cls, client_cls) in kinds.items():
            runs[name].append(measure(server_cls, client_cls, args))
            print(f"  repeat {repeat + 1}: {name} done", flush=True)
    print("\n| transport | update rate vs ideal | client CPU ms/message | server CPU ms/message |")
    print("|---|---|---|---|")
    for name, done in runs.items():
        med = {k: statistics.median(r[k] for r in done) for k in done[0]}
        print(
            f"| {name} | {100 * med['efficiency']:.1f}% | {med['client_cpu_ms']:.3f} "
            f"| {med['server_cpu_ms']:.3f} |"
        )


if __name__ == "__main__":
    main()
