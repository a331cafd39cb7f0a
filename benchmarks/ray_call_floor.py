"""The floor Ray sets on this machine: n clients calling a do-nothing server once per step.

Each client "computes" for the emulated step time and makes one call carrying a gradient-sized
array, held by the server until the step ends (as `syncswitch` does under emulation), then
waits for a weights-sized reply. The server does no work, so the update rate reached here is the
best any Ray parameter server can reach on this machine; compare ASP's rate against it.

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
class Client:
    def run(self, server, steps: int, step_s: float, size: int) -> float:
        gradient = np.zeros(size, np.float32)
        started = time.process_time()
        for _ in range(steps):
            ray.get(server.push_pull.remote(time.time() + step_s, gradient))
        return time.process_time() - started


def measure(server_cls, args) -> dict:
    server = server_cls.options(max_concurrency=4 * args.workers + 16).remote(args.parameters)
    clients = [Client.remote() for _ in range(args.workers)]
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
    print("| server kind | update rate vs ideal | client CPU ms/call | server CPU ms/call |")
    print("|---|---|---|---|")
    for name, cls in (("asyncio actor", AsyncEchoServer), ("threaded actor", ThreadedEchoServer)):
        runs = [measure(cls, args) for _ in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"| {name} | {100 * med['efficiency']:.1f}% | {med['client_cpu_ms']:.2f} "
            f"| {med['server_cpu_ms']:.2f} |"
        )


if __name__ == "__main__":
    main()
