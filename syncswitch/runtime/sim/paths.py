"""The simulator's message paths: how long a worker's gradient takes to reach a shard's CPU,
and a shard's reply to reach the worker, over the links, the NICs between nodes and the
host CPUs the cluster model (core/cluster/model.py) describes, on the virtual clock.

Every transfer and every job is handed to its queue when it is ready, in the order the
simulator's events make them, so a run is reproducible to the last bit.
"""

from __future__ import annotations

from syncswitch.control.plan import RunPlan
from syncswitch.core.cluster.fifo import FifoQueue
from syncswitch.core.cluster.model import BYTES_PER_PARAMETER, ClusterModel
from syncswitch.runtime.sim.nodes import SimNodes


class SimPaths:
    def __init__(
        self,
        cluster: ClusterModel,
        slices: list[slice],
        workers: int,
        placement: str,
        *,
        bytes_per_value: int = BYTES_PER_PARAMETER,
    ) -> None:
        self.cluster = cluster
        # A message's values as they travel (--wire-dtype: 4 bytes each, or 2).
        message_bytes = [(s.stop - s.start) * bytes_per_value for s in slices]
        network = cluster.network
        # How long a message takes up each link (its latency is the wire's, added once).
        self.worker_link_s = [network.worker_link_s(b) for b in message_bytes]
        self.server_link_s = [network.server_s(b) for b in message_bytes]
        self.apply_s = [cluster.server.apply_s(s.stop - s.start) for s in slices]
        self.nodes = SimNodes.place(cluster, workers, len(slices), placement)
        self.nic_s = [cluster.nodes.nic_s(b) for b in message_bytes]
        host = cluster.host_cpu
        self.worker_cpu_s = (host.worker_ms / 1e3, host.compute_ms / 1e3)
        # The server's handling waits for an event of its own when its node's cores are shared
        # or it holds gradients until their steps end: then jobs reach the cores in time order.
        server = cluster.server
        self.reply_s = server.reply_ms / 1e3
        self.serve_later = cluster.nodes.contended or server.applies_after_step or self.reply_s > 0
        # Which (worker, shard) pairs pass values through shared memory: one node's, when the
        # cluster says its data plane does (nodes.shared_memory), as the Ray runtime does.
        shared = cluster.nodes.shared_memory
        self.in_memory = [
            [shared and node == server_node for server_node in self.nodes.server_node]
            for node in self.nodes.worker_node
        ]
        self.latency_s = network.latency_ms / 1e3
        # A worker's own link, each way: its messages to the shards cross it in turn.
        self._worker_out = [FifoQueue() for _ in range(workers)]
        self._worker_in = [FifoQueue() for _ in range(workers)]
        self.reset(len(slices))

    @classmethod
    def of_plan(cls, plan: RunPlan, cluster: ClusterModel, slices: list[slice]) -> SimPaths:
        bytes_per_value = plan.sync.wire_dtype.itemsize
        return cls(
            cluster, slices, plan.workers, plan.job.placement, bytes_per_value=bytes_per_value
        )

    def reset(self, shards: int) -> None:
        """New servers: their links and CPUs start idle."""
        self._links_in = [FifoQueue() for _ in range(shards)]
        self._links_out = [FifoQueue() for _ in range(shards)]
        self._cpus = [FifoQueue() for _ in range(shards)]

    def reply_arrives_s(self, worker: int, shard: int, ready_s: float) -> float:
        """A shard's weights to one worker: from the server's CPU over its link (replies
        leave one after another), the NICs between nodes and the worker's link, in turn on
        each and streaming through them (`crossed_s`)."""
        if self.reply_s:
            ready_s = self.server_cpu(shard, ready_s, self.reply_s)
        if self.in_memory[worker][shard]:
            return ready_s + self.latency_s
        hops = [
            (self._links_out[shard], self.server_link_s[shard]),
            *self._nic_hops(worker, shard, inbound=False),
            (self._worker_in[worker], self.worker_link_s[shard]),
        ]
        return crossed_s(hops, ready_s) + self.latency_s

    def worker_cpu(self, worker: int, now: float, steps: int) -> tuple[float, float]:
        """(device start, computed): the worker's host CPU (taking in the weights, then the
        compute a host "device" does, for each of a local round's steps) queues for its
        node's cores; the device's time starts after the first part."""
        started_s, computed_s = now, now
        framework_s, compute_s = self.worker_cpu_s
        if framework_s or compute_s:
            node = self.nodes.worker_node[worker]
            cpu_s = framework_s + compute_s * max(steps, 1)
            cpu_start, computed_s = self.nodes.cpu(node, now, cpu_s)
            started_s = cpu_start + framework_s
        return started_s, computed_s

    def gradient_on_server_s(self, worker: int, shard: int, now: float) -> float:
        """Over the worker's link (its messages to the shards one after another), the NICs
        between nodes and the server's link, in turn on each and streaming through them
        (`crossed_s`); through shared memory, the header's latency alone."""
        if self.in_memory[worker][shard]:
            return now + self.latency_s
        hops = [
            (self._worker_out[worker], self.worker_link_s[shard]),
            *self._nic_hops(worker, shard, inbound=True),
            (self._links_in[shard], self.server_link_s[shard]),
        ]
        return crossed_s(hops, now) + self.latency_s

    def applied_s(self, shard: int, ready_s: float) -> float:
        """When the server's CPU, in turn, has applied a gradient ready at `ready_s` (cores
        not shared: no event of its own)."""
        return self._cpus[shard].serve(ready_s, self.apply_s[shard])

    def server_cpu(self, shard: int, ready_s: float, duration_s: float) -> float:
        """When the server's one thread, after its earlier jobs, and a core of its node have
        done `duration_s` of work ready at `ready_s`."""
        cpu = self._cpus[shard]
        start = max(ready_s, cpu.free_at_s)
        _, done = self.nodes.cpu(self.nodes.server_node[shard], start, duration_s)
        cpu.free_at_s = done
        cpu.busy_s += duration_s
        return done

    def driver_cpu(self, now: float, ms: float) -> None:
        """Work of the driver's node (the evaluator, the driver) takes a core meanwhile."""
        self.nodes.cpu(self.nodes.driver_node, now, ms / 1e3)

    def _nic_hops(self, worker: int, shard: int, inbound: bool) -> list[tuple[FifoQueue, float]]:
        """A message between a worker and a server on different nodes also takes the sending
        node's NIC and then the receiving node's."""
        worker_node = self.nodes.worker_node[worker]
        server_node = self.nodes.server_node[shard]
        nic_s = self.nic_s[shard]
        if worker_node == server_node or not nic_s:
            return []
        sender, receiver = (worker_node, server_node) if inbound else (server_node, worker_node)
        return [(self.nodes.nic_out[sender], nic_s), (self.nodes.nic_in[receiver], nic_s)]


def crossed_s(hops: list[tuple[FifoQueue, float]], ready_s: float) -> float:
    """When a message ready at `ready_s` has been carried by every link of its path (its
    latency apart). Its packets stream through them: each link takes it in turn (after the
    messages before it there) from when the link before began to carry it, and the last
    link to finish sets the time, as on a switched network; a message is not stored whole
    at each hop."""
    start_s = done_s = ready_s
    for queue, seconds in hops:
        end_s = queue.serve(start_s, seconds)
        start_s, done_s = end_s - seconds, max(done_s, end_s)
    return done_s
