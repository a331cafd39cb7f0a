"""actors.json: which process is which and where it runs, kept as actors start and restart.

For operators (and the fault-injection tests, which kill processes by these ids); the
placement part also goes to the controller (`on_placed`) for the summary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray

from syncswitch.files import write_json_atomic
from syncswitch.runtime.ray import placement
from syncswitch.runtime.ray.resources import ResourcePlan

STARTUP_TIMEOUT_S = 300.0


class ActorDirectory:
    def __init__(self, path: Path, resources: ResourcePlan) -> None:
        self.path = path
        self.resources = resources
        self.pids: dict[str, Any] = {"driver": os.getpid()}
        self.where: dict[str, placement.ActorPlace] = {"driver": placement.here("cpu")}
        self.nodes_seen: set[str] = set()
        self.dataset_copies: list[str] = []
        self.rejected: dict[str, int] = {}  # data-plane connections the servers closed
        # Worker connections whose values went through shared memory; offers declined.
        self.shared_memory: dict[str, Any] = {"connections": 0, "declined": {}}

    def count_shared_memory(self, per_server: list[tuple[int, dict[str, int]]]) -> None:
        declined: dict[str, int] = self.shared_memory["declined"]
        for attached, reasons in per_server:
            self.shared_memory["connections"] += attached
            for reason, count in reasons.items():
                declined[reason] = declined.get(reason, 0) + count

    def locate(self, name: str, where: placement.ActorPlace) -> None:
        """Record where an actor (re)started: its process id, node, host and device."""
        self.where[name] = where
        self.nodes_seen.add(where.node_id)
        role, _, index = name.partition(" ")
        if role == "worker":
            self.pids["workers"][int(index)] = where.pid

    def write(self) -> dict[str, Any]:
        """Write actors.json; the placement as the controller keeps it."""
        actors = {k: v for k, v in self.where.items() if k != "driver"}
        nodes = placement.describe_nodes(actors)
        described = {
            "placement": self.resources.placement,
            "nodes": len(nodes),
            "node_ids": sorted(nodes),
            "hosts": sorted({n["host"] for n in nodes.values()}),
            "nodes_seen": sorted(self.nodes_seen),
            "resources": self.resources.describe(),
        }
        described["data_plane_shared_memory"] = self.shared_memory
        if self.dataset_copies:
            described["dataset_copies_on_nodes"] = self.dataset_copies
        if self.rejected:
            # Connections a server closed: a wrong token or a malformed message (someone
            # other than this run's workers; nothing of it applied), or a reply not taken.
            described["data_plane_rejected"] = self.rejected
        write_json_atomic(
            self.path,
            {
                **self.pids,
                **described,
                "actors": {name: where.to_plain() for name, where in self.where.items()},
                "by_node": nodes,
            },
        )
        return described


def wait_ready(refs: list) -> list:
    """The answers of actors' first calls, once every one has started (or a one-line error)."""
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=STARTUP_TIMEOUT_S)
    if pending:
        raise RuntimeError(
            f"{len(pending)} actor(s) did not start within {STARTUP_TIMEOUT_S:.0f} s: the Ray "
            "cluster may lack the CPUs they request (see `ray status`)"
        )
    return ray.get(refs)
