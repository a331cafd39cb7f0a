"""What follows BSP when the run decides it (`--schedule online`): ASP, or a local-H phase on a
network where a message surely costs more than 1.5 steps' compute.

ASP saves a worker the barrier's wait, not the message: on a slow network (`wan-1g`: a 50 ms
round trip against a 20 ms step) every ASP step still pays its round trip, and only a local
phase, one message per H steps, takes the network off the critical path
(docs/local-updates.md). The choice is made from what the BSP rounds measured, alike on both
runtimes: the server times each round (from one update to the next, on the run's clock: the
simulator's links, Ray's real round trips) and reads the steps in it; a round is the slowest
worker's step plus its messages there and back, so the round's time less its longest step is
what the messages cost. Medians over the last rounds keep a slow round or a straggler from
deciding.

With `ratio` = message / step:
- unless its lower 95% confidence bound reaches LOCAL_RATIO: ASP follows, and the staleness
  rule decides when, as before (a fast network changes nothing);
- else a local phase follows, with H on a coarse grid (LOCAL_STEPS while a message costs
  under LOCAL_STEPS_UP steps, MAX_FIRST_STEPS beyond), so that a machine's load, which moves
  the ratio, does not move H; QSR grows it as the learning rate falls. The run leaves BSP
  at the first check past the floor: every BSP round there costs several steps' time, and
  the staleness rule weighs what ASP's stale gradients would cost, not what a local phase
  costs. What it costs in accuracy is
  measured in docs/local-updates.md ("Online: what follows BSP").
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

ASP = "asp"
BSP = "bsp"
LOCAL = "local-"  # local-H's name: "local-" and H


class TimedUpdate(Protocol):
    """What the meter reads of an applied update (core/sync/records.py's UpdateRecord; this
    package imports nothing of core/sync)."""

    @property
    def version(self) -> int: ...
    @property
    def protocol(self) -> str: ...
    @property
    def time_s(self) -> float: ...
    @property
    def step_time_s(self) -> float: ...


# A local phase follows where a message surely costs at least 1.5 steps' compute: the lower
# 95% confidence bound of the median per-round ratio (message / step) must reach it, so a
# ratio that only noise puts above it keeps ASP. Measured: wan-1g 2.5; the default simulated
# cluster 0.05; Ray with emulated 20 ms steps under 1; Ray on this 2-core machine with the
# MNIST-1D model's real CPU step (about 1.7 ms) 2-5, moving with the machine's load
# (docs/slow-networks.md): a margin on both sides of 1.5.
LOCAL_RATIO = 1.5
# H on a coarse grid, so that the load of the machine does not move it: 4 while a message
# costs under LOCAL_STEPS_UP steps (a factor of 4 in load leaves it there), 16 beyond; QSR grows
# it from there as the learning rate falls.
LOCAL_STEPS = 4
LOCAL_STEPS_UP = 8.0
MAX_FIRST_STEPS = 16  # QSR grows it from there (at most 8x)
MIN_ROUNDS = 8  # measured BSP rounds before a choice is made
WINDOW = 64  # the medians are over the last this many rounds
CONFIDENCE_Z = 1.96  # the median's 95% bound, from the order statistics of the rounds' ratios


@dataclass
class MessageCostMeter:
    """Times the BSP rounds of the online phase from the updates the server applied: per round,
    (its time less its longest step, its median step)."""

    rounds: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW))
    last: tuple[int, float] | None = None  # (version, time_s) of the last BSP update seen

    def add(self, records: Iterable[TimedUpdate]) -> None:
        by_version: dict[int, list[TimedUpdate]] = {}
        for record in records:
            if record.protocol == BSP:
                by_version.setdefault(record.version, []).append(record)
            else:
                self.last = None  # the next BSP update does not close a BSP round
        for version in sorted(by_version):
            group = by_version[version]
            time_s = max(r.time_s for r in group)
            steps = [r.step_time_s for r in group]
            last = self.last
            if last is not None and version == last[0] + 1 and time_s > last[1]:
                message_s = max(time_s - last[1] - max(steps), 0.0)
                self.rounds.append((message_s, statistics.median(steps)))
            self.last = (version, time_s)

    @property
    def enough(self) -> bool:
        return len(self.rounds) >= MIN_ROUNDS

    def cost(self) -> tuple[float, float]:
        """(message seconds, step seconds): medians over the measured rounds."""
        return (
            statistics.median(m for m, _ in self.rounds),
            statistics.median(s for _, s in self.rounds),
        )

    def ratio_low(self) -> float:
        """The lower 95% confidence bound of the median of the rounds' own ratios (message /
        step): the order statistic a binomial count puts below the median with 2.5% chance."""
        ratios = sorted(m / s if s > 0 else math.inf for m, s in self.rounds)
        count = len(ratios)
        index = math.floor(count / 2 - CONFIDENCE_Z * math.sqrt(count) / 2)
        return ratios[max(index, 0)]

    def to_plain(self) -> dict[str, Any]:
        return {"rounds": [list(r) for r in self.rounds], "last": list(self.last or []) or None}

    @classmethod
    def from_plain(cls, state: dict[str, Any]) -> MessageCostMeter:
        meter = cls()
        meter.rounds.extend((float(m), float(s)) for m, s in state["rounds"])
        last = state.get("last")
        meter.last = (int(last[0]), float(last[1])) if last else None
        return meter


@dataclass(frozen=True)
class FollowerChoice:
    """The phase that follows BSP, and the measurements it was chosen from."""

    protocol: str  # a protocol name: asp, local-H
    message_s: float | None  # None: too few rounds measured to choose (ASP, as before)
    step_s: float | None
    rounds: int
    ratio_low: float | None = None  # the ratio's lower 95% bound (None in runs before it)
    # Every worker on the server's machine (Ray's local instance): ASP, whatever the ratio.
    one_machine: bool = False

    @property
    def local_steps(self) -> int | None:
        """H of a local phase chosen; None for ASP."""
        return int(self.protocol[len(LOCAL) :]) if self.is_local else None

    @property
    def is_local(self) -> bool:
        return self.protocol.startswith(LOCAL)

    @property
    def ratio(self) -> float | None:
        if self.message_s is None or not self.step_s:
            return None
        return self.message_s / self.step_s

    def describe(self) -> str:
        message_s, step_s = self.message_s, self.step_s
        if message_s is None or not step_s:
            return f"{self.protocol} follows (too few BSP rounds measured to weigh the network)"
        low = "" if self.ratio_low is None else f", at least {self.ratio_low:.2f}x at 95%"
        cost = (
            f"a message costs {message_s / step_s:.2f}x a step's compute ({message_s * 1e3:.1f} "
            f"ms against {step_s * 1e3:.1f} ms, medians of {self.rounds} BSP rounds{low})"
        )
        if self.one_machine:
            return (
                f"{self.protocol} follows: every worker shares one machine with the server, "
                f"where a message is host CPU, not a network, and its cost against a step moves "
                f"with the machine's load ({cost})"
            )
        if self.is_local:
            return f"{self.protocol} follows, its H growing as the lr falls (QSR): {cost}"
        return f"{self.protocol} follows: {cost}"

    def to_plain(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "local_steps": self.local_steps,
            "message_s": self.message_s,
            "step_s": self.step_s,
            "ratio": self.ratio,
            "ratio_low": self.ratio_low,
            "one_machine": self.one_machine,
            "rounds": self.rounds,
            "local_ratio": LOCAL_RATIO,
            "describe": self.describe(),
        }

    @classmethod
    def from_plain(cls, state: dict[str, Any]) -> FollowerChoice:
        message_s, step_s = state["message_s"], state["step_s"]
        return cls(
            protocol=str(state["protocol"]),
            message_s=None if message_s is None else float(message_s),
            step_s=None if step_s is None else float(step_s),
            rounds=int(state["rounds"]),
            ratio_low=None if state.get("ratio_low") is None else float(state["ratio_low"]),
            one_machine=bool(state.get("one_machine", False)),
        )


def choose_follower(meter: MessageCostMeter, one_machine: bool = False) -> FollowerChoice:
    """ASP unless the measured messages surely cost at least LOCAL_RATIO steps (the ratio's
    lower confidence bound reaches it); then local-H, H on the grid LOCAL_STEPS, 16. On one
    machine (`one_machine`: every worker beside the server) ASP: a loopback message costs
    host CPU, not a network, and its ratio to a step moved from 1.2 to 4.9 with the load of
    this 2-core machine (docs/slow-networks.md), so it cannot choose stably."""
    rounds = len(meter.rounds)
    if not meter.enough:
        return FollowerChoice(ASP, None, None, rounds, one_machine=one_machine)
    message_s, step_s = meter.cost()
    low = meter.ratio_low()
    if one_machine:
        return FollowerChoice(ASP, message_s, step_s, rounds, low, one_machine=True)
    if step_s <= 0 or low < LOCAL_RATIO:
        return FollowerChoice(ASP, message_s, step_s, rounds, low)
    steps = LOCAL_STEPS if message_s < LOCAL_STEPS_UP * step_s else MAX_FIRST_STEPS
    return FollowerChoice(f"{LOCAL}{steps}", message_s, step_s, rounds, low)
