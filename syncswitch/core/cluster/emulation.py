"""Emulated device time, so one small machine can stand in for a cluster of GPU workers.

A worker pads each step up to an emulated device time (a sleep, which uses no CPU) drawn from
this model: base step time x the worker's speed factor x mean-one lognormal jitter. Real
gradients are still computed inside that time. With emulation off the same worker code runs
unchanged on real hardware. Every result file records the model through `describe()`.

An emulated link stands in for the network between a worker and the servers when they share
one machine: each message also takes latency + bytes / bandwidth on the worker's link (each
direction; a worker's messages to several servers cross its link one after another, as the
simulator's network model times them). A request is held by the server until that time has
passed after the step; a reply is waited for by the worker after it arrived. A server's own
link (`server_link_gbps`) is a queue its workers' messages take in turn, each way. A message
streams through both links, as over a switch: each link carries it in turn from when the
link before began to, and it has crossed when both have carried all of it (a request is held
by the server until then; a reply carries the time its server's link is done with it, and
the worker waits for its own). The time is added to the local transport's own (shared
memory or the socket), which is small beside a link slow enough to matter.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from syncswitch.core.cluster.fifo import FifoQueue
from syncswitch.core.cluster.model import MAX_BANDWIDTH_GBPS, NetworkModel
from syncswitch.core.stragglers.scenarios import StragglerScenario


@dataclass(frozen=True)
class EmulationConfig:
    step_time_ms: float = 0.0  # 0 turns emulation off
    speed_factors: tuple[float, ...] = ()  # per worker; empty means all 1.0
    jitter_sigma: float = 0.0  # sigma of the mean-one lognormal multiplier; 0 = no jitter
    stragglers: StragglerScenario = field(default_factory=StragglerScenario)
    link_gbps: float = 0.0  # each worker's emulated link, each direction; 0 = no link
    link_latency_ms: float = 0.0  # one way, per message, on the emulated link
    server_link_gbps: float = 0.0  # each server's emulated link, each direction; 0 = no link

    def __post_init__(self) -> None:
        if self.step_time_ms < 0:
            raise ValueError(f"emulated step time {self.step_time_ms} ms must be >= 0")
        if any(f <= 0 for f in self.speed_factors):
            raise ValueError(f"speed factors {self.speed_factors} must all be > 0")
        if self.jitter_sigma < 0:
            raise ValueError(f"jitter sigma {self.jitter_sigma} must be >= 0")
        if self.link_gbps < 0 or self.link_latency_ms < 0 or self.server_link_gbps < 0:
            raise ValueError(
                f"emulated link {self.link_gbps} Gbit/s, {self.link_latency_ms} ms, servers' "
                f"{self.server_link_gbps} Gbit/s: all must be >= 0"
            )
        if self.link_latency_ms > 0 and self.link_gbps == 0:
            raise ValueError(
                f"emulated link latency {self.link_latency_ms} ms needs a link bandwidth "
                "(--link-gbps > 0)"
            )

    @property
    def enabled(self) -> bool:
        """Whether any time is emulated: a device time, transient stragglers or a link."""
        return self.step_time_ms > 0 or bool(self.stragglers.episodes) or self.has_link

    @property
    def has_link(self) -> bool:
        """Whether messages cross an emulated link (a worker's, a server's or both)."""
        return self.link_gbps > 0 or self.server_link_gbps > 0

    @property
    def latency_s(self) -> float:
        """The emulated links' one-way latency per message, in seconds."""
        return self.link_latency_ms / 1e3

    def network(self) -> NetworkModel:
        """The emulated links as the simulator's network model (an unset side unlimited)."""
        return link_network(self.link_gbps, self.link_latency_ms, self.server_link_gbps)

    def link_s(self, nbytes: int) -> float:
        """How long a message takes up a worker's emulated link (0 without one), its latency
        (`link_latency_ms`) apart: the link's next message does not wait for that."""
        if self.link_gbps <= 0:
            return 0.0
        return self.network().worker_link_s(nbytes)

    def server_link_s(self, nbytes: int) -> float:
        """One message's time on a server's emulated link, once its turn comes (0 without)."""
        if self.server_link_gbps <= 0:
            return 0.0
        return self.network().server_s(nbytes)

    def speed_factor(self, worker: int) -> float:
        return self.speed_factors[worker] if self.speed_factors else 1.0

    def describe(self) -> dict[str, Any]:
        if not self.enabled:
            return {"enabled": False}
        device = self.step_time_ms > 0 or bool(self.stragglers.episodes)
        described: dict[str, Any] = {
            "enabled": True,
            "kind": (
                "emulated device time per step: the real gradient is computed inside it and "
                "applied by the server when the step's time has elapsed"
                if device
                else "real compute; only the network between workers and servers is emulated"
            ),
            "step_time_ms": self.step_time_ms or "off (real compute time)",
            "speed_factors": list(self.speed_factors) or "all 1.0",
            "jitter": (
                f"lognormal, sigma={self.jitter_sigma}, mean 1" if self.jitter_sigma else "none"
            ),
            "stragglers": self.stragglers.describe() or "none",
        }
        if self.link_gbps > 0:
            # Only where there is one: runs without a link describe themselves as before.
            described["link"] = {
                "kind": (
                    "EMULATED network: each message also takes latency + bytes / bandwidth "
                    "on the worker's link, each direction, beside the local transport's time"
                ),
                "gbps": self.link_gbps,
                "latency_ms": self.link_latency_ms,
            }
        if self.server_link_gbps > 0:
            described["server_link"] = {
                "kind": (
                    "EMULATED network: each server's link, each direction, shared by its "
                    "workers' messages in turn (bytes / bandwidth each)"
                ),
                "gbps": self.server_link_gbps,
            }
        return described


def link_network(gbps: float, latency_ms: float, server_gbps: float = 0.0) -> NetworkModel:
    """The network of `--link-gbps` (and `--server-link-gbps`) for the simulator: the links
    as emulated on Ray, a side with no emulated link unlimited."""
    return NetworkModel(
        worker_bandwidth_gbps=gbps or MAX_BANDWIDTH_GBPS,
        server_bandwidth_gbps=server_gbps or MAX_BANDWIDTH_GBPS,
        latency_ms=latency_ms,
    )


def sent_at(ready_at: float, link_s: list[float], latency_s: float) -> list[float]:
    """When each of a worker's messages (one per shard, ready at `ready_at`) has crossed its
    emulated link: one after another on it, in shard order, each a latency after its last
    byte left, as the simulator sends them (runtime/sim/paths.py)."""
    left = ready_at
    times = []
    for seconds in link_s:
        left += seconds
        times.append(left + latency_s)
    return times


def received_at(
    now: float,
    link_until: list[float | None],
    link_s: list[float],
    server_link_s: list[float],
    latency_s: float,
) -> float:
    """When the last of a worker's replies, here at `now`, has crossed its emulated link.
    Each streams through its server's link (which is done with it at `link_until`; None: no
    such link) and the worker's: the worker's link takes it, in turn, from when the server's
    began to carry it, and it is in a latency after both are done, as the simulator's
    message paths time it (runtime/sim/paths.py)."""
    replies = sorted(
        (now if until is None else until, worker_s, server_s)
        for until, worker_s, server_s in zip(link_until, link_s, server_link_s, strict=True)
    )
    link = FifoQueue()
    done = now
    for until, worker_s, server_s in replies:
        done = max(done, until + latency_s, link.serve(until - server_s, worker_s) + latency_s)
    return done


class StepTimeModel:
    """Draws one worker's emulated device time per step, reproducibly from a seed."""

    def __init__(self, config: EmulationConfig, worker: int, seed: int) -> None:
        self._config = config
        self._factor = config.speed_factor(worker)
        self._rng = random.Random(seed * 1_000_003 + worker)

    def next_step_s(self) -> float:
        cfg = self._config
        if cfg.step_time_ms <= 0:
            return 0.0
        jitter = 1.0
        if cfg.jitter_sigma > 0:
            # mu = -sigma^2/2 makes the multiplier's mean exactly 1.
            sigma = cfg.jitter_sigma
            jitter = math.exp(self._rng.gauss(-0.5 * sigma * sigma, sigma))
        return cfg.step_time_ms / 1000.0 * self._factor * jitter
