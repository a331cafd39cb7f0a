"""Joining or starting Ray: a local instance by default, a cluster when given an address."""

from __future__ import annotations

import logging
import os

import ray

# Workers mostly sleep (emulated device time) or wait on the server, so on one machine the
# actors are scheduled on logical CPUs, not one physical core each.
_LOCAL_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"}


def connect(address: str | None, min_cpus: int) -> bool:
    """Make sure Ray is up; return True when this call started it (and should stop it)."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        return True
    ray.init(**local_init_kwargs(min_cpus))
    return True


def local_init_kwargs(min_cpus: int) -> dict:
    return {
        # Always a new instance of our own: a bare ray.init() would join any cluster that
        # `ray start` left running on this machine. Joining a cluster is explicit
        # (--ray-address or RAY_ADDRESS).
        "address": "local",
        "num_cpus": max(os.cpu_count() or 1, min_cpus),
        "include_dashboard": False,
        # Advertised as loopback. Ray 2.60 still binds its gRPC servers on all interfaces
        # (ray.init resolves 127.0.0.1 to the node's address); Ray's token authentication,
        # on by default, is what keeps other hosts out.
        "_node_ip_address": "127.0.0.1",
        "logging_level": logging.WARNING,
        "runtime_env": {"env_vars": _LOCAL_ENV},
    }

