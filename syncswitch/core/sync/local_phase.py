"""The synchronizer's side of local-H phases (core/sync/local.py says what they are): the
policy at a switch into or out of one, the round a released worker is told, the outer step
over a round's deltas, and what a message counts as when it crosses a switch.

`LocalPhase` owns the outer optimizer; the fields it changes (the phase's epoch and start, the
protocol before it, the unsent samples) are the synchronizer's `LiveState`, so a snapshot
holds them with the rest.
"""

from __future__ import annotations

import torch

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.live import LiveState
from syncswitch.core.sync.local import (
    LocalRound,
    OuterOptimizer,
    StatePolicy,
    round_steps,
    switch_ramp,
)
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.protocols import LocalH
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.server_optimizer import ServerOptimizer


class LocalPhase:
    def __init__(self, config: SyncConfig, optimizer: ServerOptimizer) -> None:
        self.config = config
        self.optimizer = optimizer  # the server's: its momentum is reset when a phase ends
        self.outer = OuterOptimizer(config.local)  # the outer step's (Nesterov's) momentum

    def switch(self, live: LiveState, old: ProtocolSpec, new: ProtocolSpec) -> None:
        """The configuration policy at a switch into or out of a local phase (local.py);
        `live` already has `new` in force."""
        entering = new.gathers_deltas and not old.gathers_deltas
        if entering:
            self.outer.reset()
            live.local_epoch = live.version
            live.local_start = self.config.progress(live.samples)
            # A message computed before the switch and applied in the phase was trained
            # under the protocol it left: BSP's in-flight gradients count as BSP's samples.
            live.before_local = old
        leaving = old.gathers_deltas and not new.gathers_deltas
        if leaving and self.config.local.server_momentum_after is StatePolicy.RESET:
            self.optimizer.reset_momentum()

    def round(self, live: LiveState, active_workers: int) -> LocalRound | None:
        """What a worker released now does before its next message in a local phase (None
        outside one): H steps of its own SGD at the job's learning rate, then one delta."""
        spec = live.spec
        if spec.local_steps is None or live.done:
            return None
        cfg = self.config
        total = cfg.total_samples
        samples = live.samples
        phase_end = round(cfg.schedule.phases[live.phase_index].end * total)
        left = phase_end - samples if phase_end > samples else total - samples
        factor = cfg.lr_schedule.factor(cfg.progress(samples))
        steps = round_steps(
            spec,
            cfg.local,
            lr_factor_start=cfg.lr_schedule.factor(live.local_start),
            lr_factor_now=factor,
            samples_left=left,
            active_workers=active_workers,
        )
        return LocalRound(
            steps=steps,
            lr=self.inner_lr(live),
            momentum=cfg.momentum,
            weight_decay=self.optimizer.weight_decay,
            epoch=live.local_epoch,
            keep_inner_state=cfg.local.inner_state is StatePolicy.KEEP,
        )

    def inner_lr(self, live: LiveState) -> float:
        """A worker's own learning rate for a round starting now: the job's, with its
        schedule, times --local-lr-factor and the ramp after a switch (local.switch_ramp)."""
        cfg = self.config
        progress = cfg.progress(live.samples)
        ramp = switch_ramp(cfg.local, cfg.workers, live.local_start, progress)
        return (
            live.lr_scale
            * cfg.lr
            * cfg.lr_schedule.factor(progress)
            * cfg.local.inner_lr_factor
            * ramp
        )

    def steps_lost(self, live: LiveState, samples: int, reason: str) -> None:
        """A worker lost `samples` of local steps it never sent (it died mid-round): counted,
        with the reason, beside the messages the ledger counts."""
        if samples > 0:
            live.unsent_samples[str(reason)] += samples  # plain str: a checkpoint key

    def step(self, live: LiveState, mean: torch.Tensor, *, gathered: bool) -> tuple[float, float]:
        """Move the weights by `mean`, a combination of model deltas: a round's outer step
        (`gathered` in a local phase) or one delta's share of an average of every worker's
        model. Returns the inner learning rate and momentum the workers used, as recorded."""
        cfg = self.config
        weights = self.optimizer.weights
        lr = self.inner_lr(live)
        if gathered and live.spec.gathers_deltas:
            self.outer.step(weights, mean)
        else:
            # Its worker's share of an average of every worker's model.
            weights.sub_(mean.to(weights), alpha=1 / cfg.workers)
        return lr, cfg.momentum

    @staticmethod
    def kind(live: LiveState, gradient: Gradient) -> str:
        """The protocol a message's samples were trained under (samples_by_protocol's key)."""
        if gradient.local_steps > 0:
            return LocalH.kind  # only local rounds send deltas
        if live.spec.gathers_deltas:
            return live.before_local.kind
        return live.spec.kind

    def outer_buffer(self) -> torch.Tensor | None:
        """A CPU copy of the outer optimizer's momentum, for a snapshot."""
        buffer = self.outer.buffer
        return None if buffer is None else buffer.to("cpu", copy=True)

    def load_outer_buffer(self, buffer: torch.Tensor | None) -> None:
        """Continue with a snapshot's outer momentum, where the weights live."""
        weights = self.optimizer.weights
        self.outer.buffer = None if buffer is None else buffer.to(weights, copy=True)
