"""The transport's floor on this machine: n clients sending a do-nothing server one message
per step, as a Ray actor call, over ZeroMQ, or over `syncswitch`'s data plane (plain TCP).

Each client "computes" for the emulated step time and sends a gradient-sized array, held by
the server until the step ends (as `syncswitch` does under emulation), then waits for a
weights-sized reply. The server does no work, so the update rate reached here is the best a
parameter server on that transport can reach on this machine, the CPU per message is what
the transport alone costs, and the wait is how late after its step ends a client has its
reply. This is the measurement that chose the data plane (docs/performance.md). Runs of the
kinds are interleaved, so noise hits all alike. The ZeroMQ row needs `pip install pyzmq`
(not a dependency of syncswitch); without it the row is skipped.

    python benchmarks/ray_call_floor.py --workers 8 --step-time-ms 20 --repeats 3
    python benchmarks/ray_call_floor.py --load 1     # with a CPU-burning process beside them
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import multiprocessing
import statistics
import threading
import time

import numpy as np
import ray
from harness import Timing, add_repeats, check_timing, markdown_table, medians, parser

from syncswitch.runtime.dataplane import (
    Request,
    ServerEndpoint,
    WorkerChannel,
    encode_reply,
    encode_request,
)
from syncswitch.runtime.ray.connect import start_local


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

    def _answer(self, identity: int, request: Request) -> None:
        self.endpoint.send(identity, self.header, self.weights)

    def address(self) -> tuple[str, bytes]:
        return self.endpoint.address, self.endpoint.token

    def cpu_s(self) -> float:
        return time.process_time()


@ray.remote(num_cpus=1)
class DataPlaneClient:
    def run(self, server, steps: int, step_s: float, size: int) -> float:
        gradient = np.zeros(size, np.float32)
        channel = WorkerChannel([ray.get(server.address.remote())], probe=lambda: True)
        started, waited = time.process_time(), 0.0
        for sequence in range(steps):
            ready_at = time.time() + step_s
            header = encode_request(0, 0, sequence, 0, 32, 0.0, step_s, ready_at)
            channel.exchange([(header, gradient)])
            waited += time.time() - ready_at
        cpu_s = time.process_time() - started
        channel.close()
        return cpu_s, waited / steps


@ray.remote(num_cpus=1)
class Client:
    def run(self, server, steps: int, step_s: float, size: int) -> tuple[float, float]:
        gradient = np.zeros(size, np.float32)
        started, waited = time.process_time(), 0.0
        for _ in range(steps):
            ready_at = time.time() + step_s
            ray.get(server.push_pull.remote(ready_at, gradient))
            waited += time.time() - ready_at
        return time.process_time() - started, waited / steps


@ray.remote(num_cpus=1)
class ZmqEchoServer:
    """A ZeroMQ ROUTER holding each message until its step ends, then answering: what the
    first data plane did, without a shard behind it."""

    def __init__(self, size: int) -> None:
        import zmq

        self.weights = np.zeros(size, np.float32)
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        self.socket.bind(f"tcp://{ray.util.get_node_ip_address()}:*")
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        import zmq

        held: list[tuple[float, int, bytes]] = []
        order = itertools.count()
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        while True:
            timeout = None if not held else max(0, int((held[0][0] - time.time()) * 1000) - 1)
            if poller.poll(timeout):
                while True:
                    try:
                        identity, ready_at, _ = self.socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    heapq.heappush(held, (float(ready_at), next(order), identity))
            while held and held[0][0] - time.time() < 0.002:
                wait_s = held[0][0] - time.time()
                if wait_s > 0:
                    time.sleep(wait_s)
                _, _, identity = heapq.heappop(held)
                self.socket.send_multipart([identity, self.weights], copy=False)

    def endpoint(self) -> str:
        return self.address

    def cpu_s(self) -> float:
        return time.process_time()


@ray.remote(num_cpus=1)
class ZmqClient:
    def run(self, server, steps: int, step_s: float, size: int) -> tuple[float, float]:
        import zmq

        socket = zmq.Context.instance().socket(zmq.DEALER)
        socket.connect(ray.get(server.endpoint.remote()))
        gradient = np.zeros(size, np.float32)
        started, waited = time.process_time(), 0.0
        for _ in range(steps):
            ready_at = time.time() + step_s
            socket.send_multipart([repr(ready_at).encode(), gradient], copy=False)
            socket.recv_multipart()
            waited += time.time() - ready_at
        cpu_s = time.process_time() - started
        socket.close(linger=0)
        return cpu_s, waited / steps


def _burn(stop) -> None:
    """Contention: a process that computes in short bursts, as a busy neighbour does."""
    while not stop.is_set():
        sum(range(100_000))
        time.sleep(0.001)


def measure(server_cls, client_cls, args) -> dict:
    server = server_cls.options(max_concurrency=4 * args.workers + 16).remote(args.parameters)
    clients = [client_cls.remote() for _ in range(args.workers)]
    step_s = args.step_time_ms / 1000
    ray.get([c.run.remote(server, 10, 0.0, args.parameters) for c in clients])  # warm up
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    burners = [context.Process(target=_burn, args=(stop,)) for _ in range(args.load)]
    for burner in burners:
        burner.start()
    cpu0 = ray.get(server.cpu_s.remote())
    started = time.perf_counter()
    client_cpu, waits = zip(
        *ray.get([c.run.remote(server, args.steps, step_s, args.parameters) for c in clients]),
        strict=True,
    )
    elapsed = time.perf_counter() - started
    server_cpu = ray.get(server.cpu_s.remote()) - cpu0
    stop.set()
    for burner in burners:
        burner.join()
    calls = args.steps * args.workers
    for actor in [server, *clients]:
        ray.kill(actor)
    return {
        "efficiency": calls / elapsed / (args.workers / step_s),
        "client_cpu_ms": 1000 * statistics.mean(client_cpu) / args.steps,
        "server_cpu_ms": 1000 * server_cpu / calls,
        "wait_ms": 1000 * statistics.mean(waits),
    }


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--workers", type=int, default=8)
    cli.add_argument("--step-time-ms", type=float, default=20.0)
    cli.add_argument("--steps", type=int, default=300, help="calls per client")
    cli.add_argument("--parameters", type=int, default=5210, help="floats per message")
    add_repeats(cli, 3)
    cli.add_argument(
        "--load", type=int, default=0, help="CPU-burning processes beside the clients (default 0)"
    )
    args = cli.parse_args()
    start_local(args.workers + 4)
    title = (
        f"{args.workers} clients, EMULATED {args.step_time_ms:g} ms step, "
        f"{args.parameters} float32 per message; {args.load} CPU-burning process(es) beside "
        f"them; medians of {args.repeats} runs"
    )
    print(check_timing(title, Timing.EMULATED) + "\n")
    kinds = {
        "Ray call, asyncio actor": (AsyncEchoServer, Client),
        "Ray call, threaded actor": (ThreadedEchoServer, Client),
        "ZeroMQ (ROUTER/DEALER)": (ZmqEchoServer, ZmqClient),
        "syncswitch data plane (TCP)": (DataPlaneEchoServer, DataPlaneClient),
    }
    try:
        import zmq  # noqa: F401
    except ImportError:
        print("pyzmq is not installed: no ZeroMQ row (pip install pyzmq)")
        del kinds["ZeroMQ (ROUTER/DEALER)"]
    runs: dict[str, list[dict]] = {name: [] for name in kinds}
    for repeat in range(args.repeats):
        for name, (server_cls, client_cls) in kinds.items():
            runs[name].append(measure(server_cls, client_cls, args))
            print(f"  repeat {repeat + 1}: {name} done", flush=True)
    columns = ("transport", "update rate vs ideal", "reply wait after the step, ms")
    columns += ("client CPU ms/message", "server CPU ms/message")
    cells = []
    for name, done in runs.items():
        med = medians(done)
        cells.append(
            (
                name,
                f"{100 * med['efficiency']:.1f}%",
                f"{med['wait_ms']:.2f}",
                f"{med['client_cpu_ms']:.3f}",
                f"{med['server_cpu_ms']:.3f}",
            )
        )
    print("\n" + "\n".join(markdown_table(columns, cells)))


if __name__ == "__main__":
    main()
