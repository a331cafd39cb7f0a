"""Staleness-aware asynchronous updates: two rules for a gradient computed on old weights.

- `StalenessLr.INVERSE` (Zhang et al., IJCAI'16, "Staleness-aware async-SGD"): a gradient of
  staleness tau >= 1 is applied at lr / tau, never below `lr_floor` x lr; staleness 0 (and
  1) keep lr.
- Delay compensation (DC-ASGD, Zheng et al., ICML'17): the applied gradient is
  g + lambda * g * g * (w_now - w_stale), a first-order correction of g towards the
  gradient at the current weights, with g * g standing in for the Hessian's diagonal.
  `w_stale` are the weights the worker computed g on, so the server keeps, per worker, a
  copy of the weights it last handed that worker (`WeightsHandedOut`).

Both act only on a gradient applied on its own under ASP or SSP (or a plain gradient in a
local phase, which update.py treats as ASP): BSP rounds and local rounds are untouched.
Pure functions do the arithmetic; the classes hold the per-worker copies and the settings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import torch

# A floor that caps the slow-down at 10x whatever the worker count: with n workers ASP's
# typical staleness is about n - 1, so at 8 workers the floor binds only for stragglers
# (tau > 10), and a straggler's gradient still counts for a tenth of a fresh one.
DEFAULT_LR_FLOOR = 0.1


class StalenessLr(StrEnum):
    NONE = "none"
    INVERSE = "inverse"


@dataclass(frozen=True)
class StalenessConfig:
    """The staleness rules in force in ASP/SSP phases (none by default)."""

    lr_rule: StalenessLr = StalenessLr.NONE
    lr_floor: float = DEFAULT_LR_FLOOR  # the smallest lr factor `inverse` gives, in (0, 1]
    delay_compensation: float = 0.0  # DC-ASGD's lambda; 0 = off

    def __post_init__(self) -> None:
        if not 0 < self.lr_floor <= 1:
            raise ValueError(f"lr_floor must be in (0, 1], got {self.lr_floor}")
        if not self.delay_compensation >= 0:
            raise ValueError(f"delay_compensation must be >= 0, got {self.delay_compensation}")

    @property
    def enabled(self) -> bool:
        return self.lr_rule is not StalenessLr.NONE or self.delay_compensation > 0

    def describe(self) -> str:
        """The rules in force, in words (start-up line, summary)."""
        parts = []
        if self.lr_rule is StalenessLr.INVERSE:
            parts.append(f"lr / staleness (floor {self.lr_floor:g} x lr)")
        if self.delay_compensation > 0:
            parts.append(f"delay compensation (lambda {self.delay_compensation:g})")
        return " + ".join(parts) or "none"


def handed_out_bytes(workers: int, parameters: int) -> int:
    """Delay compensation's worst case: one float32 copy of the weights per worker."""
    return workers * parameters * 4


def staleness_lr_factor(rule: StalenessLr, staleness: int, floor: float) -> float:
    """The factor a gradient of `staleness` multiplies the learning rate by."""
    if rule is StalenessLr.NONE or staleness <= 1:
        return 1.0
    return max(1.0 / staleness, floor)


def compensate(
    gradient: torch.Tensor,
    weights_now: torch.Tensor,
    weights_stale: torch.Tensor,
    lam: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """DC-ASGD's gradient, g + lam * g * g * (w_now - w_stale), into `out` (a new tensor
    without it); `gradient` is never written (it may be a view its caller still reads)."""
    # In place in one buffer: on 270k parameters a new tensor per operation cost 10x the
    # server's whole update (fresh pages for each); three passes over one reused buffer.
    result = torch.sub(weights_now, weights_stale, out=out).mul_(gradient)
    return torch.addcmul(gradient, result, gradient, value=lam, out=result)


class WeightsHandedOut:
    """The weights each worker was last handed, as (version, tensor), for DC-ASGD.

    One copy per distinct version held by some worker: a BSP release hands every worker the
    same version and costs one copy; in ASP each worker may hold its own, so the worst case
    is workers x parameters x 4 bytes (`worst_case_bytes`). Copies live where the weights
    do (a GPU shard keeps them in GPU memory).
    """

    def __init__(self, workers: int, version: int, weights: torch.Tensor) -> None:
        self.workers = workers
        self.numel = weights.numel()
        self._version_of: dict[int, int] = {}
        self._copies: dict[int, torch.Tensor] = {}
        self._spare: list[torch.Tensor] = []  # copies let go, reused: no allocation per update
        self.peak_bytes = 0  # the most held at once
        self.reset(version, weights)

    @property
    def worst_case_bytes(self) -> int:
        return handed_out_bytes(self.workers, self.numel)

    @property
    def held_bytes(self) -> int:
        """Bytes of copies held now, spares for reuse included (the process holds them)."""
        copies = [*self._copies.values(), *self._spare]
        return sum(c.numel() * c.element_size() for c in copies)

    def reset(self, version: int, weights: torch.Tensor) -> None:
        """Every worker computes on `weights` next (the start, a restored server: each worker
        rejoins and pulls them)."""
        self._spare += self._copies.values()
        self._copies = {}
        self.handed(range(self.workers), version, weights)

    def handed(self, workers: Iterable[int], version: int, weights: torch.Tensor) -> None:
        """`workers` were just given the weights of `version` (`weights`, as they are now)."""
        workers = list(workers)
        if not workers:
            return
        for worker in workers:
            self._version_of[worker] = version
        # Copies no worker holds any more are kept for reuse, before a new one is made: at
        # most one copy per worker, ever.
        held = set(self._version_of.values())
        for old in [v for v in self._copies if v not in held]:
            self._spare.append(self._copies.pop(old))
        if version not in self._copies:
            spare = self._spare.pop() if self._spare else torch.empty_like(weights)
            self._copies[version] = spare.copy_(weights)
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)

    def weights_of(self, worker: int, version: int) -> torch.Tensor | None:
        """The weights `worker` computed on if they were those of `version`; None when the
        server did not hand it that version (it pulled weights some other way)."""
        if self._version_of.get(worker) != version:
            return None
        return self._copies.get(version)


class StalenessRules:
    """The rules of `config` over one shard's weights: the effective learning rate and the
    compensated gradient of one asynchronous update."""

    def __init__(self, config: StalenessConfig, workers: int, weights: torch.Tensor) -> None:
        self.config = config
        self.handed_out: WeightsHandedOut | None = (
            WeightsHandedOut(workers, 0, weights) if config.delay_compensation > 0 else None
        )
        # Gradients applied uncompensated, stale but computed on weights this server did not
        # hand that worker (e.g. pulled after a rejoin, racing an update): counted, reported.
        self.uncompensated = 0
        self._out: torch.Tensor | None = None  # the compensated gradient, made once

    def lr(self, lr: float, staleness: int) -> float:
        cfg = self.config
        return lr * staleness_lr_factor(cfg.lr_rule, staleness, cfg.lr_floor)

    def gradient(
        self,
        values: torch.Tensor,
        *,
        worker: int,
        computed_version: int,
        staleness: int,
        weights_now: torch.Tensor,
    ) -> torch.Tensor:
        """The gradient to apply: DC-ASGD's when it is on and the gradient is stale."""
        handed_out = self.handed_out
        if handed_out is None or staleness <= 0:
            return values  # fresh: w_now - w_stale is 0
        stale = handed_out.weights_of(worker, computed_version)
        if stale is None:
            self.uncompensated += 1
            return values
        if self._out is None:
            self._out = torch.empty_like(weights_now)
        values = values.to(device=weights_now.device, dtype=weights_now.dtype)
        lam = self.config.delay_compensation
        return compensate(values, weights_now, stale, lam, out=self._out)
