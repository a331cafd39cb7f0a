"""One update of the weights: a barrier's round (BSP's sample-weighted mean, or a local round's
outer step) or one message's own, measured for online timing on the way when its round is
wanted, and recorded as one `UpdateRecord` per message."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from syncswitch.core.sync.admission import GradientLedger
from syncswitch.core.sync.barrier_sum import BarrierSum
from syncswitch.core.sync.clipping import clipped, squared_norm
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.hyperparams import (
    AsyncLrPolicy,
    MomentumPolicy,
    async_momentum,
    update_learning_rate,
)
from syncswitch.core.sync.live import LiveState
from syncswitch.core.sync.local_phase import LocalPhase
from syncswitch.core.sync.norm_exchange import HeldRound, NormExchange
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Gradient, NormPartial, UpdateRecord
from syncswitch.core.sync.server_optimizer import ServerOptimizer
from syncswitch.core.sync.staleness import StalenessRules
from syncswitch.core.timing.gradient_stats import RoundStatsAccumulator


class Updater:
    def __init__(
        self,
        config: SyncConfig,
        optimizer: ServerOptimizer,
        local: LocalPhase,
        now_s: Callable[[], float],
    ) -> None:
        self.config = config
        self.optimizer = optimizer
        self.local = local
        self.now_s = now_s
        # Effective lr and compensated gradient of a stale ASP/SSP update (staleness.py).
        self.staleness = StalenessRules(config.staleness, config.workers, optimizer.weights)
        # Gradient statistics of each BSP round, while the schedule's online phase (whose end
        # the run controller decides from them) is in force; None without one.
        self.online_index = config.schedule.online_index  # asked every round: kept
        self.stats: RoundStatsAccumulator | None = None
        # The barrier's round, summed as its messages arrive (core/sync/barrier_sum.py).
        self.barrier = BarrierSum()
        # With clipping over several shards, a BSP round waits for every shard's part of its
        # norm (core/sync/clipping.py); None otherwise.
        self.exchange: NormExchange | None = None
        if config.optimizer.max_grad_norm is not None and config.shards > 1:
            self.exchange = NormExchange(config.shard, config.shards)
        if config.schedule.online_index is not None and config.stats_coordinates is not None:
            self.stats = RoundStatsAccumulator(
                optimizer.weights.numel(),
                every=config.stats_every,
                workers=config.stats_workers,
                coordinates=config.stats_coordinates,
            )

    def gather(self, live: LiveState, pending: list[Gradient], candidates: set[int]) -> None:
        """A message joined the barrier (`pending`): sum what is ready (barrier_sum.py)."""
        self.barrier.add(pending, candidates, keep_rows=self._keeps_rows(live))

    def apply(
        self,
        live: LiveState,
        ledger: GradientLedger,
        gradients: list[Gradient],
        *,
        gathered: bool = False,
        summed: torch.Tensor | None = None,
        held: HeldRound | None = None,
        norm: float | None = None,
    ) -> list[UpdateRecord]:
        """One update from `gradients`: a barrier's (`gathered`: BSP's, or a local round's
        outer step), one message's own, or (`summed`: their sum of b_i g_i, a barrier a
        switch cut short) their sum, as that many messages' shares under the new rule;
        `held`: a BSP round combined before, clipped by the global `norm` of its mean."""
        if self.exchange is not None and held is None:
            self.exchange.updated()  # norm partials received are for no round held here
        if summed is not None:
            total = sum(g.samples for g in gradients)
            # k messages' shares at once: the mean at k workers' share of the step.
            mean = summed.div_(total)
        elif held is not None:
            gradients, mean, total = held.gradients, held.mean, held.samples
        elif gathered:
            gradients, mean, total = self._combine(live, gradients)
        else:
            gradients, mean, total = gradients, gradients[0].values, gradients[0].samples
        kind = LocalPhase.kind(live, gradients[0])
        if gradients[0].local_steps > 0:
            if not gathered:
                mean = mean * len(gradients)  # each delta is its worker's share
            lr, momentum = self.local.step(live, mean, gathered=gathered)
        else:
            alone = gradients[0] if len(gradients) == 1 else None
            mean = self._clipped(mean, alone, norm)
            lr, momentum = self._step(live, mean, count=len(gradients), alone=alone)
        applied_to = live.version
        live.version += 1
        live.samples += total
        live.samples_by_protocol[kind] += total
        if live.spec.straggler_detour is not None:  # the work a greedy return counts
            live.phase_bsp_samples += total
        for g in gradients:
            ledger.record_applied(g.worker, g.sequence)
        now_s = self.now_s()
        progress = self.config.progress(live.samples)
        return [
            UpdateRecord(
                version=live.version,
                worker=g.worker,
                sequence=g.sequence,
                computed_version=g.computed_version,
                staleness=applied_to - g.computed_version,
                protocol=live.spec.name,
                samples=live.samples,
                progress=progress,
                time_s=now_s,
                loss=g.loss,
                step_time_s=g.step_time_s,
                lr=lr,
                momentum=momentum,
            )
            for g in gradients
        ]

    def holds(self, live: LiveState, pending: list[Gradient]) -> bool:
        """Whether a complete barrier round waits for the other shards' norms: a BSP round
        of gradients (a local round's deltas are not clipped again) over several shards."""
        return (
            self.exchange is not None
            and live.spec.averages_gradients
            and pending[0].local_steps == 0
        )

    def hold(self, live: LiveState, pending: list[Gradient]) -> NormPartial:
        """Combine the complete round and hold it; returns this shard's part of its norm."""
        assert self.exchange is not None
        gradients, mean, total = self._combine(live, pending)
        return self.exchange.hold(HeldRound(gradients, mean, total, live.version + 1))

    def _clipped(
        self, mean: torch.Tensor, alone: Gradient | None, norm: float | None
    ) -> torch.Tensor:
        """`mean` clipped to the run's global norm, if it clips: by `norm` (a held round's,
        all shards'), else the lone gradient's own (its worker measured it), else this
        slice's (the whole gradient with one shard; see clipping.py for the exceptions)."""
        max_norm = self.config.optimizer.max_grad_norm
        if max_norm is None:
            return mean
        if norm is None:
            norm = alone.norm if alone is not None and alone.norm is not None else None
        if norm is None:
            norm = math.sqrt(squared_norm(mean))
        return clipped(mean, norm, max_norm)

    def squares_wanted(self, live: LiveState) -> bool:
        """Whether the admission check should square the gradient it checks: it joins a BSP
        round the statistics measure, and they take worker norms as they are (every worker,
        every coordinate)."""
        stats = self.stats
        return stats is not None and self._measuring(live) and stats.needs_squares(live.version + 1)

    def _measuring(self, live: LiveState) -> bool:
        """Whether this round's statistics are wanted: the online phase, under BSP."""
        return live.phase_index == self.online_index and live.spec.averages_gradients

    def _keeps_rows(self, live: LiveState) -> bool:
        """Whether the round now at the barrier is one the statistics measure (they read
        each worker's row, so the barrier keeps the messages' values)."""
        stats = self.stats
        return stats is not None and self._measuring(live) and stats.wants(live.version + 1)

    def _combine(
        self, live: LiveState, gradients: list[Gradient]
    ) -> tuple[list[Gradient], torch.Tensor, int]:
        """A barrier's sample-weighted mean, summed as its messages arrived in worker order
        (barrier_sum.py: BSP stays bit-for-bit reproducible whatever the arrival order), and
        measured on the way when the statistics want this round. Returns the gradients in
        the order they were summed, the mean and the samples it stands for."""
        keep_rows = self._keeps_rows(live)
        gradients, mean, total = self.barrier.finish(gradients, keep_rows=keep_rows)
        stats = self.stats
        # Every row at hand (a round whose measuring began mid-round, were there one, let
        # some go: it is not measured).
        rows_kept = all(g.values.numel() == mean.numel() for g in gradients)
        if stats is not None and keep_rows and len(gradients) > 1 and rows_kept:
            # Measured before the update; the round produces version + 1. The admission
            # check squared each gradient when asked (`squares_wanted`).
            rows = torch.stack([g.values * (g.samples / total) for g in gradients])
            samples = [g.samples for g in gradients]
            squares = [g.squared_norm for g in gradients]
            partials = stats.observe_rows(live.version + 1, rows, samples, mean, squares=squares)
            if partials is not None:
                live.partials.append(partials)
        return gradients, mean, total

    def _step(
        self, live: LiveState, mean: torch.Tensor, *, count: int, alone: Gradient | None
    ) -> tuple[float, float]:
        """An SGD step by `mean`, the combination of `count` gradients (`alone`: the one
        gradient of an update of its own). Returns the effective learning rate and momentum,
        as recorded."""
        cfg = self.config
        progress = cfg.progress(live.samples)
        # A plain gradient in a local phase (sent before the switch) is an ASP update.
        spec = live.spec.lone_update_rule
        if spec.is_async and cfg.async_lr is AsyncLrPolicy.NONE:
            count = cfg.workers  # one gradient at BSP's learning rate
        lr = live.lr_scale * update_learning_rate(
            cfg.lr, cfg.lr_schedule, progress, count, cfg.workers
        )
        momentum = update_momentum(cfg, spec, live.momentum_policy, progress, live.async_start)
        if alone is not None and spec.is_async and cfg.staleness.enabled:
            staleness = live.version - alone.computed_version
            lr = self.staleness.lr(lr, staleness)
            mean = self.staleness.gradient(
                mean,
                worker=alone.worker,
                computed_version=alone.computed_version,
                staleness=staleness,
                weights_now=self.optimizer.weights,
            )
        self.optimizer.step(mean, lr=lr, momentum=momentum)
        return lr, momentum


def update_momentum(
    config: SyncConfig,
    spec: ProtocolSpec,
    policy: MomentumPolicy,
    progress: float,
    async_start: float,
) -> float:
    """The momentum of an update under `spec`: the configured one under BSP, the momentum
    policy's in an asynchronous phase that began at `async_start`."""
    if not spec.is_async:
        return config.momentum
    return async_momentum(
        config.momentum,
        policy,
        config.workers,
        progress,
        async_start,
        config.momentum_ramp_fraction,
    )
