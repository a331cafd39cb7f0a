"""Gradient clipping by global norm (`--grad-clip`), as torch.nn.utils.clip_grad_norm_ does it.

Clipping is applied where each update is made: to a BSP round's averaged gradient on the
servers, to each ASP/SSP gradient on the servers, and to each inner step of a local phase on
the workers (core/sync/local.py). A local round's delta and its outer step are not clipped
again: its steps were.

The norm is the whole model's, never one shard's slice:

- An ASP/SSP gradient's norm is measured by its worker, which holds all of it, and travels
  with the message (`Gradient.norm`): every shard scales its slice by the same coefficient.
  A non-finite norm is refused by every shard alike (gate.py), so no shard applies a
  message another dropped.
- A BSP round's mean exists only in slices, one per shard. With one shard its norm is local.
  With several, each shard holds its complete round, sends the others its slice's squared
  norm (a `NormPartial`, a few bytes) and applies the round once every shard's partial for
  that round is in (`NormExchange`, norm_exchange.py, which says why a round's parts need
  no version to be told apart); the runtime routes the partials (Ray: one actor call per
  peer; the simulator: in place, its latency not modelled).
- A round that a switch reaches before every shard's part of its norm is in is applied with
  the parts at hand, and counted (`NormExchange.incomplete`; summary.json's traffic block
  says `norm_exchange_incomplete_rounds` when there were any). A barrier a switch cut short
  after its messages were summed is clipped by its own slice's norm. A rollback or the end
  drops a held round's messages, as it drops any at the barrier.
"""

from __future__ import annotations

import torch

# torch.nn.utils.clip_grad_norm_'s: max_norm / (norm + 1e-6).
CLIP_EPS = 1e-6


def squared_norm(values: torch.Tensor) -> float:
    """Sum of squares, accumulated in float64 (shards' partials add up across slices)."""
    return float(torch.linalg.vector_norm(values, dtype=torch.float64)) ** 2


def clip_coefficient(norm: float, max_norm: float) -> float:
    """The factor clip_grad_norm_ scales by: max_norm / (norm + 1e-6), at most 1."""
    return min(max_norm / (norm + CLIP_EPS), 1.0)


def clipped(values: torch.Tensor, norm: float, max_norm: float) -> torch.Tensor:
    """`values` scaled to global norm at most `max_norm` (`norm`: theirs, over the whole
    model); the same tensor when no scaling is needed, so a run never clipped keeps its bits."""
    coefficient = clip_coefficient(norm, max_norm)
    if coefficient >= 1.0:
        return values
    return values * coefficient
