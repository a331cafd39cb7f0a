"""What each role's actors ask Ray for: CPUs, GPUs and the torch threads they run with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RoleResources:
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    threads: int = 1  # torch intra-op threads inside the actor

    def __post_init__(self) -> None:
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError(f"resources must be >= 0, got {self}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")

    def actor_options(self) -> dict[str, Any]:
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}


@dataclass(frozen=True)
class ResourcePlan:
    """One entry per role. The default asks one CPU per actor and one torch thread: workers
    mostly sleep (emulated device time) or wait on a server, so on one machine they are
    scheduled on logical CPUs (ray_setup starts a local Ray with at least this many)."""

    server: RoleResources = RoleResources()
    worker: RoleResources = RoleResources()
    evaluator: RoleResources = RoleResources()

    def cpus(self, workers: int, servers: int) -> float:
        """CPUs one run asks Ray for in all."""
        return (
            workers * self.worker.num_cpus
            + servers * self.server.num_cpus
            + self.evaluator.num_cpus
        )
