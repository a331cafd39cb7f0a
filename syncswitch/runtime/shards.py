"""A run's server shards, built and driven alike by every runtime.

`ShardSpec` is how one `ServerShard` (control/shard.py) is built: the simulator builds it in
place, the Ray runtime hands it to a `ParameterServer` actor (runtime/ray/server.py), which
builds it on its own node and device. The controller's decisions reach a shard as a
`ShardAction`, one function of the shard for both runtimes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from syncswitch.control.decisions import RollBack
from syncswitch.control.plan import RunPlan
from syncswitch.control.shard import ServerShard
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.records import Decision, NormPartial, Outcome
from syncswitch.core.sync.state import SynchronizerState

# One of the controller's calls on a shard; what it releases, the runtime answers.
ShardAction = Callable[[ServerShard], Outcome]


@dataclass(frozen=True)
class ShardSpec:
    """One server shard of a run: its slice of the initial weights, and where it starts."""

    config: SyncConfig
    initial: np.ndarray  # the shard's slice of the flat parameters
    restore: SynchronizerState | None = None  # a snapshot's state (a replaced server, a resume)
    observe_steps: bool = False  # record arriving step times for the straggler detector

    def build(
        self, *, clock: Callable[[], float] = time.perf_counter, device: str = "cpu"
    ) -> ServerShard:
        return ServerShard(
            self.config,
            self.initial,
            restore=self.restore,
            observe_steps=self.observe_steps,
            clock=clock,
            device=device,
        )


def shard_specs(
    plan: RunPlan,
    initial: np.ndarray,
    slices: list[slice],
    restore: tuple[SynchronizerState, ...] | None,
) -> list[ShardSpec]:
    """The run's shards, one per parameter slice; the first reports arriving steps when an
    straggler policy decides on them."""
    return [
        ShardSpec(
            # Which shard of how many: a clipped BSP round's norm is all of theirs.
            replace(plan.sync, shard=index, shards=len(slices)),
            initial[part],
            restore=restore[index] if restore else None,
            observe_steps=index == 0 and plan.stragglers is not None,
        )
        for index, part in enumerate(slices)
    ]


def carry_out(decision: Decision) -> ShardAction:
    """A straggler policy's decision, for every shard alike."""
    return partial(ServerShard.carry_out, decision=decision)


def worker_lost(worker: int) -> ShardAction:
    return partial(ServerShard.worker_lost, worker=worker)


def norm_arrived(norm: NormPartial) -> ShardAction:
    """Another shard's part of a held BSP round's norm (core/sync/clipping.py)."""
    return partial(ServerShard.norm_arrived, partial=norm)


def finish() -> ShardAction:
    """Another shard has applied the whole workload: end here too."""
    return ServerShard.finish


def roll_back(order: RollBack) -> list[ShardAction]:
    """Divergence: each shard back to its state in `order`, in place."""
    return [
        partial(
            ServerShard.roll_back,
            state=state,
            protocol=order.protocol,
            lr_scale=order.lr_scale,
            momentum=order.momentum,
            reason=order.label,
        )
        for state in order.shard_states
    ]
