"""What each role's actors ask Ray for (CPUs, GPUs, the torch threads they run with and the
device they compute on), and where they go: one placement-group bundle per actor.

`plan_resources` is a pure function of the job and of what the cluster has (`ClusterView`),
so every refusal (no CUDA, more GPUs than there are, more nodes than there are) is decided
before any actor starts, and is tested without Ray.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from syncswitch.config import TrainConfig
from syncswitch.errors import ConfigError

# Ray accepts fractional resources to 4 decimal places.
_GPU_QUANTUM = 1e-4
PLACEMENT_STRATEGIES = {"pack": "PACK", "spread": "SPREAD", "strict-spread": "STRICT_SPREAD"}


@dataclass(frozen=True)
class RoleResources:
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    threads: int = 1  # torch intra-op threads inside the actor
    device: str = "cpu"  # "cpu" or "cuda": where the actor's tensors live

    def __post_init__(self) -> None:
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError(f"resources must be >= 0, got {self}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.device == "cuda" and self.num_gpus <= 0:
            raise ValueError("a cuda actor must ask Ray for a GPU share")

    def actor_options(self) -> dict[str, Any]:
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}

    def bundle(self) -> dict[str, float]:
        """This actor's placement-group bundle (Ray refuses zero-valued entries)."""
        wanted = {"CPU": self.num_cpus, "GPU": self.num_gpus}
        return {name: amount for name, amount in wanted.items() if amount > 0}


@dataclass(frozen=True)
class ResourcePlan:
    """One entry per role, and the placement strategy. The default asks one CPU per actor and
    one torch thread, on the CPU: workers mostly sleep (emulated device time) or wait on a
    server, so on one machine they are scheduled on logical CPUs (connect.py starts a local
    Ray with at least this many)."""

    server: RoleResources = RoleResources()
    worker: RoleResources = RoleResources()
    evaluator: RoleResources = RoleResources()
    placement: str = "pack"  # a key of PLACEMENT_STRATEGIES

    def cpus(self, workers: int, servers: int) -> float:
        """CPUs one run asks Ray for in all."""
        return (
            workers * self.worker.num_cpus
            + servers * self.server.num_cpus
            + self.evaluator.num_cpus
        )

    def gpus(self, workers: int, servers: int) -> float:
        return (
            workers * self.worker.num_gpus
            + servers * self.server.num_gpus
            + self.evaluator.num_gpus
        )

    def bundles(self, workers: int, servers: int) -> list[dict[str, float]]:
        """The placement group's bundles, in the order of `bundle_index`."""
        return (
            [self.server.bundle()] * servers
            + [self.evaluator.bundle()]
            + [self.worker.bundle()] * workers
        )

    @staticmethod
    def server_bundle(index: int) -> int:
        return index

    @staticmethod
    def evaluator_bundle(servers: int) -> int:
        return servers

    @staticmethod
    def worker_bundle(index: int, servers: int) -> int:
        return servers + 1 + index

    @property
    def strategy(self) -> str:
        return PLACEMENT_STRATEGIES[self.placement]

    def describe(self) -> dict[str, Any]:
        """Each role's device and what it asks Ray for."""
        return {
            role: {"device": r.device, "num_cpus": r.num_cpus, "num_gpus": r.num_gpus}
            for role, r in (
                ("worker", self.worker),
                ("server", self.server),
                ("evaluator", self.evaluator),
            )
        }


@dataclass(frozen=True)
class ClusterView:
    """What the Ray cluster (or, before a local Ray starts, this machine) has to offer."""

    cpus: float
    gpus: float
    nodes: int
    max_node_gpus: float  # the most GPUs on any one node: a bundle must fit on one
    where: str  # e.g. "this machine" or "the Ray cluster at 10.0.0.5:6379", for messages
    node_gpus: tuple[float, ...] = field(default=())

    @property
    def has_gpus(self) -> bool:
        return self.gpus > 0


def plan_resources(config: TrainConfig, cluster: ClusterView) -> ResourcePlan:
    """Each role's resources and device for this job on this cluster, or one ConfigError
    line saying what does not fit; nothing has started when it is raised."""
    devices = {
        role: _resolve_device(role, asked, cluster) for role, asked in config.role_devices().items()
    }
    on_gpu = [role for role, device in devices.items() if device == "cuda"]
    counts = {"worker": config.workers, "server": config.servers, "evaluator": 1}
    gpu_actors = sum(counts[role] for role in on_gpu)
    share = config.gpus_per_worker
    if share > 0 and not on_gpu:
        raise ConfigError(
            f"gpus_per_worker = {share:g} asks for GPUs, but {cluster.where} reports none "
            "(so --device auto means cpu); drop --gpus-per-worker or run where there are GPUs"
        )
    if on_gpu and share == 0:
        # Share the GPUs evenly; a whole GPU at most, since more would not be used.
        share = _floor_quantum(min(1.0, cluster.gpus / gpu_actors))
        if share <= 0:
            raise ConfigError(
                f"{gpu_actors} actors on cuda cannot share {cluster.gpus:g} GPUs in Ray's "
                f"steps of {_GPU_QUANTUM:g}; use fewer workers or --device cpu"
            )
    wanted = share * gpu_actors
    if wanted > cluster.gpus + 1e-9:
        listed = ", ".join(f"{counts[r]} {r}{'s' if counts[r] > 1 else ''}" for r in on_gpu)
        raise ConfigError(
            f"gpus_per_worker = {share:g} asks for {wanted:g} GPUs in all ({listed} on cuda); "
            f"{cluster.where} has {cluster.gpus:g}: use a smaller share or fewer workers"
        )
    if share > cluster.max_node_gpus + 1e-9:
        raise ConfigError(
            f"gpus_per_worker = {share:g} does not fit on one node: the largest node of "
            f"{cluster.where} has {cluster.max_node_gpus:g} GPUs"
        )
    roles = {
        role: RoleResources(
            num_cpus=1.0,
            num_gpus=share if devices[role] == "cuda" else 0.0,
            threads=1,
            device=devices[role],
        )
        for role in counts
    }
    plan = ResourcePlan(
        server=roles["server"],
        worker=roles["worker"],
        evaluator=roles["evaluator"],
        placement=config.placement,
    )
    _check_fits(plan, config, cluster)
    return plan


def _resolve_device(role: str, asked: str, cluster: ClusterView) -> str:
    if asked == "auto":
        return "cuda" if cluster.has_gpus else "cpu"
    if asked == "cuda" and not cluster.has_gpus:
        flag = "--device" if role == "worker" else f"--{role}-device"
        raise ConfigError(f"{flag} cuda: {cluster.where} has no CUDA GPU; use {flag} cpu or auto")
    return asked


def _check_fits(plan: ResourcePlan, config: TrainConfig, cluster: ClusterView) -> None:
    cpus = plan.cpus(config.workers, config.servers)
    if cpus > cluster.cpus + 1e-9:
        raise ConfigError(
            f"{cluster.where} has {cluster.cpus:g} CPUs; this job needs {cpus:g} (one per "
            "worker, server and the evaluator): use fewer workers or a larger cluster"
        )
    bundles = len(plan.bundles(config.workers, config.servers))
    if plan.placement == "strict-spread" and bundles > cluster.nodes:
        raise ConfigError(
            f"placement strict-spread puts each of the job's {bundles} actors (workers, "
            f"servers, the evaluator) on its own node; {cluster.where} has {cluster.nodes} "
            "node(s): use spread or pack, or fewer workers"
        )


def _floor_quantum(value: float) -> float:
    return math.floor(value / _GPU_QUANTUM + 1e-9) * _GPU_QUANTUM
