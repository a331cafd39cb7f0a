"""Where the actors go and where they went: the run's placement group (one bundle per
worker, per server and one for the evaluator) and each actor's node, host and device.

`RunPlacement` owns the group from its creation to its release: the supervisor asks it for
the options that start an actor of a role in its bundle, and never holds the group itself.

Ray places the bundles by the strategy (`--placement`); an actor started in a bundle runs
on that bundle's node. If a node is lost, Ray places its bundles again on the nodes left,
and actors started in them (a restarted worker, a restored server) run there.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from syncswitch.runtime.ray.resources import ResourcePlan


def create_group(plan: ResourcePlan, workers: int, servers: int, timeout_s: float) -> Any:
    """The run's placement group, once Ray has placed every bundle (or a RuntimeError)."""
    group = placement_group(plan.bundles(workers, servers), strategy=plan.strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise RuntimeError(
            f"Ray could not place the job's actors ({plan.placement}) within {timeout_s:.0f} s: "
            "the cluster's free CPUs/GPUs or nodes are not enough right now (see `ray status`)"
        )
    return group


def in_bundle(group: PlacementGroup, index: int) -> dict[str, Any]:
    """Actor options that start an actor in one bundle of the group."""
    return {
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=group,
            placement_group_bundle_index=index,
            # Tasks the actor starts itself are not the run's and take no bundle.
            placement_group_capture_child_tasks=False,
        )
    }


class RunPlacement:
    """The run's placement group, and Ray's options for each actor: its role's resources and
    its bundle of the group (ResourcePlan's bundle order)."""

    def __init__(self, plan: ResourcePlan, workers: int, servers: int, timeout_s: float) -> None:
        self.plan = plan
        self.servers = servers
        self.group = create_group(plan, workers, servers, timeout_s)

    def server_options(self, index: int) -> dict[str, Any]:
        return {
            **self.plan.server.actor_options(),
            **in_bundle(self.group, self.plan.server_bundle(index)),
        }

    def evaluator_options(self) -> dict[str, Any]:
        return {
            **self.plan.evaluator.actor_options(),
            **in_bundle(self.group, self.plan.evaluator_bundle(self.servers)),
        }

    def worker_options(self, index: int) -> dict[str, Any]:
        return {
            **self.plan.worker.actor_options(),
            **in_bundle(self.group, self.plan.worker_bundle(index, self.servers)),
        }

    def release(self) -> None:
        remove_placement_group(self.group)


@dataclass(frozen=True)
class ActorPlace:
    """Where one actor (or the driver) runs: its process, node, host and device."""

    pid: int
    node_id: str
    node_ip: str
    host: str
    device: str

    def to_plain(self) -> dict[str, Any]:
        """For actors.json."""
        return asdict(self)


def here(device: str) -> ActorPlace:
    """Where the calling actor runs (for actors.json and the summary)."""
    context = ray.get_runtime_context()
    return ActorPlace(
        pid=os.getpid(),
        node_id=context.get_node_id(),
        node_ip=ray.util.get_node_ip_address(),
        host=socket.gethostname(),
        device=device,
    )


def describe_nodes(actors: dict[str, ActorPlace]) -> dict[str, Any]:
    """Per node: its host and IP, and which actors it runs now."""
    nodes: dict[str, dict[str, Any]] = {}
    for name, where in actors.items():
        node = nodes.setdefault(
            where.node_id, {"host": where.host, "node_ip": where.node_ip, "actors": []}
        )
        node["actors"].append(name)
    return nodes


def object_nodes(ref: Any) -> list[str]:
    """The nodes whose object store holds a copy of an object (one copy per node at most)."""
    from ray.experimental import get_object_locations

    located = get_object_locations([ref]).get(ref) or {}
    return sorted(located.get("node_ids") or [])
