"""Local-update phases (`local-H`): local SGD, and DiLoCo-style outer steps over model deltas.

In a local phase a worker pulls the weights, takes H steps of its own SGD (the inner optimizer,
the job's learning rate and momentum), and sends its model delta (pulled - current, a
"pseudo-gradient") as one message. The server gathers a synchronous round of deltas at the
same barrier BSP uses (so the elastic barrier, the straggler policies and the divergence guard
act on rounds as they act on BSP updates) and applies one outer step to their sample-weighted
mean d:

- average (local SGD, the default): new = old - outer_lr * d; with outer_lr 1, the mean of the
  workers' models.
- nesterov (DiLoCo, Douillard et al. 2023): SGD with Nesterov momentum on d, with its own
  learning rate (DiLoCo uses 0.7) and momentum (0.9).

With one worker and plain averaging a local phase is sequential SGD; with H = 1, no momentum
and plain averaging it is BSP (the inner learning rate is BSP's: a round of H = 1 is one BSP
update of the same global batch). tests/core/sync/test_local.py checks both against the core.

What happens at a switch into or out of a local phase (the configuration policy, like
--momentum-at-switch for ASP):
- The inner optimizer's momentum buffer lives on the worker. `keep` (default): it carries over
  from round to round within a local phase (Lin et al.'s local SGD keeps local momentum); a
  new local phase, or a restarted worker, starts it at zero. `reset`: every round starts it at
  zero.
- The outer optimizer's momentum starts at zero when a local phase begins, and is kept in the
  synchronizer's state (checkpoints, resume) while the phase lasts.
- The server's own momentum buffer (BSP/ASP updates) is not used in a local phase. When a
  local phase ends, `reset` (default) zeroes it (it describes weights from before the phase);
  `keep` carries it over unchanged.
- A plain gradient that reaches the server in a local phase (sent before the switch) is applied
  at once as an ASP update (lr/n); a delta that reaches it outside a local phase (an online
  switch cut a round short) is applied at once as its worker's 1/n share of an average. Both
  workers go on at once; nothing is dropped for the switch.

H may adapt (`--local-steps-rule`): `qsr` (Gu et al., ICLR'24, "quadratic synchronization
rule") grows H as the learning rate decays, H_t = H * (lr_at_phase_start / lr_t)^2, capped at
QSR_MAX_GROWTH x H. A round never runs past its phase's end or the workload's: its H is cut to
the steps left (`round_steps`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
import torch

from syncswitch.core.sync.clipping import clipped, squared_norm
from syncswitch.core.sync.protocol import MAX_LOCAL_STEPS, ProtocolSpec
from syncswitch.core.sync.server_optimizer import OptimizerConfig, ServerOptimizer, make_optimizer

QSR_MAX_GROWTH = 8  # qsr: H grows at most to this multiple of the phase's H
# After a switch from a gradient phase the inner lr ramps up over at least this fraction of
# training, and over SWITCH_WARMUP_PER_SHARE times the share trained before the switch when
# that is longer: the longer the large-batch phase ran, the sharper the model it leaves
# (docs/slow-networks.md: both chosen by measurement).
SWITCH_WARMUP = 0.15
SWITCH_WARMUP_PER_SHARE = 1.2


class OuterOptimizerKind(StrEnum):
    AVERAGE = "average"  # local SGD: the mean of the workers' models (outer lr 1)
    NESTEROV = "nesterov"  # DiLoCo: SGD with Nesterov momentum over the mean delta


class LocalStepsRule(StrEnum):
    FIXED = "fixed"  # H as the schedule says
    QSR = "qsr"  # H grows as the learning rate decays


class StatePolicy(StrEnum):
    KEEP = "keep"
    RESET = "reset"


@dataclass(frozen=True)
class LocalConfig:
    """How local phases run: the outer step, the H rule, the policy at switches."""

    outer: OuterOptimizerKind = OuterOptimizerKind.AVERAGE
    outer_lr: float = 1.0
    outer_momentum: float = 0.9  # nesterov only
    steps_rule: LocalStepsRule = LocalStepsRule.FIXED
    inner_state: StatePolicy = StatePolicy.KEEP  # the worker's momentum buffer across rounds
    server_momentum_after: StatePolicy = StatePolicy.RESET  # when a local phase ends
    worker_batch: int = 0  # samples per worker step; 0: unknown (a round's H is not cut)
    inner_lr_factor: float = 1.0  # inner lr = the job's lr x this (1: local-1 is BSP)
    # After a switch from a gradient phase: the inner lr ramps up over this fraction of
    # training (or longer after a long BSP phase: switch_ramp), from switch_lr_start
    # (x 1/sqrt(workers)) to the full inner lr (0: no ramp).
    switch_warmup: float = SWITCH_WARMUP
    switch_lr_start: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.inner_lr_factor) and self.inner_lr_factor > 0):
            raise ValueError(f"inner lr factor {self.inner_lr_factor} must be > 0")
        if not 0.0 <= self.switch_warmup < 1.0:
            raise ValueError(f"switch warmup {self.switch_warmup} must be in [0, 1)")
        if not (math.isfinite(self.outer_lr) and self.outer_lr > 0):
            raise ValueError(f"outer lr {self.outer_lr} must be > 0")
        if not 0.0 <= self.outer_momentum < 1.0:
            raise ValueError(f"outer momentum {self.outer_momentum} must be in [0, 1)")


@dataclass(frozen=True)
class LocalRound:
    """What a worker released in a local phase does before its next message: `steps` steps of
    SGD at `lr`/`momentum`, then one delta. `epoch` names the local phase (the version it
    began at): a worker keeping its inner momentum keeps it only within one epoch."""

    steps: int
    lr: float
    momentum: float
    weight_decay: float
    epoch: int
    keep_inner_state: bool


class OuterOptimizer:
    """The outer step of a round: weights -= outer_lr * (d, or Nesterov's d + mu * buffer)."""

    def __init__(self, config: LocalConfig) -> None:
        self.config = config
        self.buffer: torch.Tensor | None = None  # Nesterov's momentum; None before a step

    def reset(self) -> None:
        self.buffer = None

    def step(self, weights: torch.Tensor, mean_delta: torch.Tensor) -> None:
        cfg = self.config
        delta = mean_delta.to(device=weights.device, dtype=weights.dtype)
        if cfg.outer is OuterOptimizerKind.AVERAGE:
            weights.sub_(delta, alpha=cfg.outer_lr)
            return
        mu = cfg.outer_momentum
        if self.buffer is None:
            self.buffer = delta.clone()
        else:
            self.buffer.mul_(mu).add_(delta)
        weights.sub_(delta.add(self.buffer, alpha=mu), alpha=cfg.outer_lr)


def switch_ramp(config: LocalConfig, workers: int, phase_start: float, progress: float) -> float:
    """The inner learning rate's factor `progress` into training, in a local phase that began
    at `phase_start` (0: at the start of training, where no ramp applies)."""
    if config.switch_warmup <= 0 or phase_start <= 0:
        return 1.0
    start = min(1.0, config.switch_lr_start / math.sqrt(workers))
    length = max(config.switch_warmup, SWITCH_WARMUP_PER_SHARE * phase_start)
    done = (progress - phase_start) / length
    if done >= 1:
        return 1.0
    return start + (1.0 - start) * max(done, 0.0)


def qsr_steps(steps: int, lr_factor_start: float, lr_factor_now: float) -> int:
    """QSR's H: H * (lr at the phase's start / lr now)^2, between H and QSR_MAX_GROWTH * H."""
    if lr_factor_now <= 0:
        return steps * QSR_MAX_GROWTH
    growth = (lr_factor_start / lr_factor_now) ** 2
    return max(steps, min(math.floor(steps * growth), steps * QSR_MAX_GROWTH))


def round_steps(
    spec: ProtocolSpec,
    config: LocalConfig,
    *,
    lr_factor_start: float,
    lr_factor_now: float,
    samples_left: int,
    active_workers: int,
) -> int:
    """A round's H: the phase's (or the rule's), cut so the round's samples (every active
    worker's H steps) do not run past `samples_left` (to the phase's or the workload's end)."""
    steps = spec.local_steps
    if steps is None:
        raise ValueError(f"{spec.name} is not a local phase")
    if config.steps_rule is LocalStepsRule.QSR:
        steps = qsr_steps(steps, lr_factor_start, lr_factor_now)
    steps = min(steps, MAX_LOCAL_STEPS)
    if config.worker_batch > 0 and samples_left > 0:
        per_step = config.worker_batch * max(active_workers, 1)
        steps = min(steps, max(1, math.ceil(samples_left / per_step)))
    return steps


@dataclass(frozen=True)
class ModelBuffers:
    """The flat buffers a worker's model computes in (its weights; its gradient, which on
    shared memory is also the request the servers read)."""

    weights: np.ndarray
    gradient: np.ndarray


class InnerLoop:
    """A worker's side of a local phase: its own SGD over a copy of the pulled weights.

    `gradient` computes a step's gradient (and loss) on weights given as a float32 array; the
    Ray worker and the simulator pass their own (runtime/gradient.py underneath both)."""

    def __init__(self, optimizer: OptimizerConfig | None = None) -> None:
        # The server's kind: a worker's local steps with Adam are Adam steps.
        self.optimizer = optimizer or OptimizerConfig()
        self._sgd: ServerOptimizer | None = None
        self._epoch: int | None = None

    def forget(self) -> None:
        """A new process, or weights from elsewhere: the inner state starts afresh."""
        self._sgd, self._epoch = None, None

    def run(
        self,
        pulled: np.ndarray,
        plan: LocalRound,
        gradient: Callable[[np.ndarray], tuple[np.ndarray, float]],
        model: ModelBuffers | None = None,
    ) -> tuple[np.ndarray, float]:
        """Take `plan.steps` steps from `pulled`; return (pulled - current, mean loss).

        Given the `model`'s own buffers (a process with a model of its own), the steps update
        its weights in place and the delta is left in its gradient buffer: at 17M parameters
        each step's copy of the weights into the model cost more than a message through
        shared memory. The arithmetic, and so every bit, is the same either way."""
        start = torch.from_numpy(np.array(pulled, dtype=np.float32))
        sgd = self._sgd
        keep = plan.keep_inner_state and sgd is not None and self._epoch == plan.epoch
        if keep and sgd is not None:
            sgd.load_state_dict({**sgd.state_dict(), "weights": start})
        else:
            config = replace(self.optimizer, weight_decay=plan.weight_decay)
            sgd = self._sgd = make_optimizer(config, start)
        if model is not None:
            sgd.adopt(torch.from_numpy(model.weights))
        self._epoch = plan.epoch
        losses = []
        max_norm = self.optimizer.max_grad_norm
        for _ in range(plan.steps):
            values, loss = gradient(sgd.weights.numpy())
            step = torch.from_numpy(values)
            if max_norm is not None:  # each inner step clipped, as a server's update is
                step = clipped(step, math.sqrt(squared_norm(step)), max_norm)
            sgd.step(step, lr=plan.lr, momentum=plan.momentum)
            losses.append(loss)
        if model is None:
            return (start - sgd.weights).numpy(), float(np.mean(losses))
        torch.sub(start, sgd.weights, out=torch.from_numpy(model.gradient))
        return model.gradient, float(np.mean(losses))
