"""The barrier sums a round's messages as they arrive, in worker order (core/sync/barrier_sum.py):
the same bits whatever the arrival order, the old stack-and-sum's mean within float32
rounding, and no message's values held once summed."""

from __future__ import annotations

import itertools

import torch

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.synchronizer import Synchronizer

DIM, WORKERS = 1000, 6
SAMPLES = (16, 16, 12, 16, 20, 16)  # unequal batches: the mean is sample-weighted


def _sync(workers: int = WORKERS, schedule: str = "bsp") -> Synchronizer:
    config = SyncConfig(
        workers=workers, total_samples=10**6, schedule=Schedule.parse(schedule), lr=0.4
    )
    return Synchronizer(config, FlatSGD(torch.zeros(DIM)), clock=itertools.count().__next__)


def _gradients(seed: int, version: int = 0) -> list[Gradient]:
    generator = torch.Generator().manual_seed(seed)
    return [
        Gradient(
            worker=w,
            sequence=version,
            computed_version=version,
            values=torch.randn(DIM, generator=generator) * 10.0 ** (w - 3),
            samples=SAMPLES[w],
            loss=1.0,
            step_time_s=0.01,
        )
        for w in range(WORKERS)
    ]


def _weights_after(order: list[int], rounds: int = 3) -> torch.Tensor:
    sync = _sync()
    for version in range(rounds):
        gradients = _gradients(seed=version, version=version)
        for w in order:
            sync.submit(gradients[w])
    assert sync.live.version == rounds
    return sync.optimizer.weights.clone()


def test_the_update_is_the_same_bits_whatever_the_arrival_order() -> None:
    reference = _weights_after(list(range(WORKERS)))
    for order in ([5, 4, 3, 2, 1, 0], [2, 0, 5, 1, 4, 3], [1, 3, 5, 0, 2, 4]):
        assert torch.equal(_weights_after(order), reference)


def test_the_mean_is_the_old_stack_and_sum_within_float32_rounding() -> None:
    sync = _sync()
    gradients = _gradients(seed=7)
    total = sum(SAMPLES)
    rows = torch.stack([g.values * (g.samples / total) for g in gradients])
    expected = -0.4 * rows.sum(dim=0)  # one SGD step from zero weights, lr 0.4, no momentum
    for w in (3, 1, 0, 5, 2, 4):
        sync.submit(gradients[w])
    # Another order of float32 additions: a few ulps of the largest term apart (where terms
    # cancel, the relative difference of the result can be larger).
    ulp = torch.finfo(torch.float32).eps * 0.4 * rows.abs().max()
    difference = (sync.optimizer.weights - expected).abs().max()
    assert 0 < difference <= 8 * ulp


def test_out_of_order_messages_wait_and_summed_ones_are_let_go() -> None:
    sync = _sync()
    gradients = _gradients(seed=1)
    for w in (2, 1):
        sync.submit(gradients[w])
    # Worker 0 may still send: nothing can be summed before it.
    assert sync.updater.barrier.folded == []
    assert all(g.values.numel() == DIM for g in gradients[1:3])
    sync.submit(gradients[0])
    assert [g.worker for g in sync.updater.barrier.folded] == [0, 1, 2]
    assert [g.values.numel() for g in gradients[:3]] == [0, 0, 0]  # only in the sum now
    for w in (3, 4, 5):
        sync.submit(gradients[w])
    assert sync.live.version == 1 and sync.updater.barrier.folded == []


def test_a_worker_the_barrier_no_longer_waits_for_is_not_waited_for_in_the_order() -> None:
    sync = _sync()
    sync.exclude(0)
    gradients = _gradients(seed=2)
    sync.submit(gradients[2])
    sync.submit(gradients[1])
    assert [g.worker for g in sync.updater.barrier.folded] == [1, 2]


def test_a_switch_mid_round_applies_the_summed_messages_as_their_shares() -> None:
    # Two summed gradients, caught by a switch to ASP: one update of their mean at two
    # workers' share of the learning rate (0.4 x 2/6), recorded per gradient.
    sync = _sync()
    gradients = _gradients(seed=3)
    total = gradients[0].samples + gradients[1].samples
    mean = (gradients[0].values * 16 + gradients[1].values * 16) / total
    for w in (0, 1):
        sync.submit(gradients[w])
    outcome = sync.switch_to(ASP, reason="test")
    assert [r.worker for r in outcome.applied] == [0, 1]
    assert {r.protocol for r in outcome.applied} == {"asp"} and sync.live.version == 1
    assert sorted(outcome.released) == [0, 1] and sync.accounting().applied == 2
    expected = -0.4 * 2 / WORKERS * mean
    torch.testing.assert_close(sync.optimizer.weights, expected, rtol=1e-6, atol=1e-9)
