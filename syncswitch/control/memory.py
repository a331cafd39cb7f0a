"""What a run's processes hold in memory for its model, estimated before anything starts.

Counted per process, in bytes, from the parameter count and the plan: what grows with the
model (weights, gradients, optimizer state, the data plane's buffers, delay compensation's
copies). Activations are not counted: they depend on the batch and the model's shape, not
only its size, and the start-up line says so. The figures follow the Ray runtime's processes
(runtime/ray/); a simulated run holds its workers' models in one process, and its summary
says the estimate is of a Ray run of the same job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from syncswitch.control.plan import RunPlan
from syncswitch.core.sync.server_optimizer import OptimizerKind
from syncswitch.core.sync.staleness import handed_out_bytes
from syncswitch.core.sync.wire_dtype import WireDtype

FLOAT32 = 4


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per process, by what they hold: one server (the largest shard), one worker, and
    the driver with the evaluator."""

    parameters: int
    servers: int
    workers: int
    server: dict[str, int]
    worker: dict[str, int]
    others: dict[str, int]

    @property
    def total_bytes(self) -> int:
        return (
            self.servers * sum(self.server.values())
            + self.workers * sum(self.worker.values())
            + sum(self.others.values())
        )

    def describe(self) -> str:
        """One line for the terminal (summary.json itemizes it)."""
        server, worker = sum(self.server.values()), sum(self.worker.values())
        return (
            f"memory for the model's {self.parameters:,} parameters (estimate, activations "
            f"not counted): {size_text(server)} per server, {size_text(worker)} per worker, "
            f"{size_text(self.total_bytes)} in all"
        )

    def to_plain(self) -> dict[str, Any]:
        return {
            "estimate": True,
            "activations_counted": False,
            "parameters": self.parameters,
            "per_server_bytes": dict(self.server),
            "per_worker_bytes": dict(self.worker),
            "driver_and_evaluator_bytes": dict(self.others),
            "total_bytes": self.total_bytes,
        }


def estimate_memory(plan: RunPlan, parameters: int, *, shared_memory: bool) -> MemoryEstimate:
    """The estimate for `plan` on a model of `parameters`; `shared_memory`: workers and
    servers share a machine's memory for the values (runtime/dataplane/shared.py)."""
    sync = plan.sync
    servers, workers = plan.job.servers, plan.workers
    shard = -(-parameters // servers)
    wire = sync.wire_dtype.itemsize
    narrow = sync.wire_dtype is not WireDtype.FLOAT32
    state_per_value = 2 if sync.optimizer.kind is not OptimizerKind.SGD else 1
    server = {
        "weights": shard * FLOAT32,
        "optimizer state": shard * FLOAT32 * state_per_value,
        "round sum": shard * FLOAT32,
        # One read-only copy per version for Ray's replies (a rejoin, the final pull); a
        # narrower wire also keeps the version's rounded values.
        "reply copies": shard * (FLOAT32 + (wire if narrow else 0)),
    }
    if not shared_memory:
        # Each message lands in its own buffer; a measured round keeps every worker's.
        server["received messages"] = workers * shard * (wire + (FLOAT32 if narrow else 0))
    if sync.staleness.delay_compensation > 0:
        server["delay compensation"] = -(-handed_out_bytes(workers, parameters) // servers)
    worker = {"weights and gradient": 2 * parameters * FLOAT32}
    if shared_memory and narrow:
        worker["shared memory"] = 2 * parameters * wire  # float32: the model computes in it
    elif not shared_memory:
        worker["received weights"] = parameters * (wire + (FLOAT32 if narrow else 0))
    if _may_run_locally(plan):
        # A local round's start, its own optimizer's weights and state, and the delta.
        worker["local rounds"] = parameters * FLOAT32 * (3 + state_per_value)
    # The driver: the initial model, the final weights and the best evaluation's.
    others = {"driver": 3 * parameters * FLOAT32, "evaluator": 2 * parameters * FLOAT32}
    return MemoryEstimate(parameters, servers, workers, server, worker, others)


def _may_run_locally(plan: RunPlan) -> bool:
    """Whether a phase may be local-H: one named so, or an online phase that may pick it."""
    phases = plan.schedule.phases
    return plan.schedule.online_index is not None or any(
        phase.spec.local_steps is not None for phase in phases
    )


def size_text(size: float) -> str:
    """Bytes in the largest unit that keeps a number of at least 1 (1.5 GiB, 83 KiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:,.0f} TiB"
