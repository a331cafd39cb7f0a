"""The synchronizer's mutable fields as one value, and how that value becomes a snapshot's
frozen `SynchronizerState` and back.

Everything the synchronizer changes as it runs is a field of `LiveState`, except what its
collaborators own: the weights and the optimizer's state (ServerOptimizer), the SSP clocks and
the barrier (WaitRoom), the exactly-once ledger and quarantine (admission.py), the outer optimizer's
momentum (local_phase.py) and the statistics accumulator. Taking a snapshot copies this value
(with those collaborators' parts) into a `SynchronizerState`; restoring and rolling back build
a new value from one and assign it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.protocol import ASP, ProtocolSpec
from syncswitch.core.sync.state import LocalState, OptimizerState, SynchronizerState
from syncswitch.core.timing.gradient_stats import RoundPartials
from syncswitch.records import Switch


def _seconds_by_name() -> defaultdict[str, float]:
    # Seconds are floats (a Counter's values are typed as ints); a missing name reads 0.
    return defaultdict(float)


@dataclass(eq=False)
class LiveState:
    """The synchronizer's own mutable fields (see the module's docstring for what is not)."""

    spec: ProtocolSpec  # the protocol in force
    momentum_policy: MomentumPolicy  # a rollback may lower it
    started_at: float  # the clock's reading the run's seconds count from
    version: int = 0
    samples: int = 0
    phase_index: int = 0
    excluded: set[int] = field(default_factory=set)  # the barrier and SSP bound do not wait
    done: bool = False
    lr_scale: float = 1.0  # lowered by a divergence rollback, if configured
    # After a divergence rollback the run stays in this protocol whatever the schedule.
    pinned: ProtocolSpec | None = None
    # Gradients computed on weights older than this were computed on a branch that a
    # rollback abandoned; versions only ever increase, so the test is one comparison.
    version_floor: int = 0
    time_by_protocol: defaultdict[str, float] = field(default_factory=_seconds_by_name)
    samples_by_protocol: Counter[str] = field(default_factory=Counter)
    switches: list[Switch] = field(default_factory=list)
    phase_bsp_samples: int = 0  # samples applied under BSP in the current phase
    phase_started_s: float = 0.0
    async_start: float = 0.0  # progress at which the asynchronous part began (momentum ramp)
    next_eval_index: int = 1
    next_checkpoint_index: int = 1
    # Version from which a re-admitted worker's gradients count again under BSP: one it
    # computed while excluded, on older weights, would be applied stale.
    admitted_from: dict[int, int] = field(default_factory=dict)
    snapshot_requested: str = ""  # label of a snapshot to take at the next boundary
    # Gradient statistics measured since the last update's outcome handed them on.
    partials: list[RoundPartials] = field(default_factory=list)
    # Local phases: the version and progress the current local phase began at (its epoch
    # names it to the workers; QSR reads the lr there), and what a gradient that reaches a
    # local phase was trained under.
    local_epoch: int = 0
    local_start: float = 0.0
    before_local: ProtocolSpec = ASP
    # Measured at arrival: messages and bytes of values received, by protocol ("local":
    # deltas); samples of local steps a lost worker never sent, by reason.
    messages_by_protocol: Counter[str] = field(default_factory=Counter)
    bytes_by_protocol: Counter[str] = field(default_factory=Counter)
    unsent_samples: Counter[str] = field(default_factory=Counter)

    def capture(
        self,
        *,
        optimizer: OptimizerState,
        clocks: Mapping[int, int],
        ledger: Mapping[str, Any],
        outer_buffer: torch.Tensor | None,
        time_s: float,
    ) -> SynchronizerState:
        """This value, with the collaborators' parts, as a frozen state (copies throughout)."""
        return SynchronizerState(
            optimizer=optimizer,
            version=self.version,
            samples=self.samples,
            phase_index=self.phase_index,
            protocol=self.spec,
            excluded=tuple(sorted(self.excluded)),
            clocks=dict(sorted(clocks.items())),
            time_s=time_s,
            phase_started_s=self.phase_started_s,
            time_by_protocol=dict(self.time_by_protocol),
            samples_by_protocol=dict(self.samples_by_protocol),
            switches=tuple(self.switches),
            async_start=self.async_start,
            phase_bsp_samples=self.phase_bsp_samples,
            next_eval_index=self.next_eval_index,
            next_checkpoint_index=self.next_checkpoint_index,
            lr_scale=self.lr_scale,
            momentum_policy=self.momentum_policy,
            pinned=self.pinned,
            version_floor=self.version_floor,
            ledger=ledger,
            local=LocalState(
                outer_buffer=outer_buffer,
                epoch=self.local_epoch,
                start=self.local_start,
                messages_by_protocol=dict(self.messages_by_protocol),
                bytes_by_protocol=dict(self.bytes_by_protocol),
                unsent_samples=dict(self.unsent_samples),
            ),
        )

    def restored(self, state: SynchronizerState, *, started_at: float) -> LiveState:
        """This value continuing from `state` (a new server, a resumed run): its position and
        what happened up to it. Fields a state does not keep stay as they are."""
        return dataclasses.replace(
            self,
            **_position(state),
            version=state.version,
            version_floor=state.version_floor,
            time_by_protocol=defaultdict(float, state.time_by_protocol),
            switches=list(state.switches),
            # Traffic is what happened: restored with the ledger, never rolled back.
            messages_by_protocol=Counter(state.local.messages_by_protocol),
            bytes_by_protocol=Counter(state.local.bytes_by_protocol),
            unsent_samples=Counter(state.local.unsent_samples),
            started_at=started_at,
            phase_started_s=state.phase_started_s,
            done=False,
        )

    def rolled_back(
        self,
        state: SynchronizerState,
        *,
        protocol: ProtocolSpec,
        lr_scale: float,
        momentum_policy: MomentumPolicy,
    ) -> LiveState:
        """This value back at `state`'s position, pinned to `protocol`. Versions keep
        increasing (the restored weights get a new one, the floor below which a gradient was
        computed on the abandoned branch); accounting and time are not rolled back."""
        version = max(self.version, state.version) + 1
        # The rollback's own settings override the state's (no one left out any more).
        overrides = {
            "version": version,
            "version_floor": version,
            "excluded": set(),
            "lr_scale": lr_scale,
            "momentum_policy": momentum_policy,
            "pinned": protocol,
        }
        return dataclasses.replace(self, **(_position(state) | overrides))


def _position(state: SynchronizerState) -> dict[str, Any]:
    """The fields both restoring and rolling back take from a state: where the run stood."""
    return {
        "samples": state.samples,
        "phase_index": state.phase_index,
        "spec": state.protocol,
        "excluded": set(state.excluded),
        "samples_by_protocol": Counter(state.samples_by_protocol),
        "async_start": state.async_start,
        "phase_bsp_samples": state.phase_bsp_samples,
        "next_eval_index": state.next_eval_index,
        "next_checkpoint_index": state.next_checkpoint_index,
        "lr_scale": state.lr_scale,
        "momentum_policy": state.momentum_policy,
        "pinned": state.pinned,
        "local_epoch": state.local.epoch,
        "local_start": state.local.start,
        "partials": [],  # the weights jumped: nothing measured before it is handed on
    }
