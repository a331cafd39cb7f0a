"""The cluster's nodes in the simulator: where each process runs, the cores its host CPU
queues for and the NIC its transfers between nodes queue for (core/cluster/model.py's `nodes`)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from syncswitch.core.cluster.fifo import FifoQueue
from syncswitch.core.cluster.model import ClusterModel


class CorePool:
    """A node's cores: a job takes the core that is free soonest and runs to the end on it.

    With more busy processes than cores, jobs wait for a core, so each process's work takes
    longer, as when the operating system shares the cores among them (the same throughput;
    only the order in which concurrent jobs finish differs). Jobs are handed in at the time
    they become ready, so no core sits idle while a ready job waits.
    """

    def __init__(self, cores: int) -> None:
        self._free_at_s = [0.0] * cores  # a heap: the soonest free core first
        self.busy_s = 0.0  # total service time, for utilisation

    def serve(self, ready_s: float, duration_s: float) -> tuple[float, float]:
        """(start, end) of a job ready at `ready_s` that needs `duration_s` of one core."""
        start = max(ready_s, self._free_at_s[0])
        heapq.heapreplace(self._free_at_s, start + duration_s)
        self.busy_s += duration_s
        return start, start + duration_s


@dataclass
class SimNodes:
    """Where the job's processes run, and each node's cores and NIC."""

    worker_node: list[int]
    server_node: list[int]
    driver_node: int  # the driver and the evaluator run beside the first server
    cores: list[CorePool | None]  # None: a core for every process (no contention)
    nic_out: list[FifoQueue] = field(default_factory=list)
    nic_in: list[FifoQueue] = field(default_factory=list)

    @classmethod
    def place(cls, cluster: ClusterModel, workers: int, servers: int, placement: str) -> SimNodes:
        shape = cluster.nodes
        worker_node = shape.worker_nodes(workers, placement)
        count = max(worker_node) + 1 if worker_node else 1
        if shape.servers_with_workers:
            server_node = [0] * servers
        else:
            server_node = list(range(count, count + servers))
            count += servers
        return cls(
            worker_node=worker_node,
            server_node=server_node,
            driver_node=server_node[0] if server_node else 0,
            cores=[CorePool(shape.cores) if shape.contended else None for _ in range(count)],
            nic_out=[FifoQueue() for _ in range(count)],
            nic_in=[FifoQueue() for _ in range(count)],
        )

    def cpu(self, node: int, ready_s: float, duration_s: float) -> tuple[float, float]:
        """(start, end) of `duration_s` of host CPU on `node`, ready at `ready_s`."""
        pool = self.cores[node]
        if pool is None:
            return ready_s, ready_s + duration_s
        return pool.serve(ready_s, duration_s)
