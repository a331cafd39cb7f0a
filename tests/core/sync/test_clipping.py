"""Gradient clipping by global norm (core/sync/clipping.py): oracles against torch's
clip_grad_norm_, and the shards' exchange of a BSP round's norm, scripted."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from syncswitch.core.sync.clipping import clip_coefficient, clipped, squared_norm
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.local import InnerLoop, LocalRound
from syncswitch.core.sync.optimizer import FlatSGD, flat_gradient, flatten_parameters
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.records import Gradient, Outcome
from syncswitch.core.sync.server_optimizer import OptimizerConfig
from syncswitch.core.sync.sharding import parameter_shards
from syncswitch.core.sync.synchronizer import Synchronizer, receive_norm

BATCH = 4
MAX_NORM = 0.05  # well below these gradients' norms: every update is clipped


def small_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def config(schedule: str = "bsp", workers: int = 4, **kw) -> SyncConfig:
    return SyncConfig(
        workers=workers,
        total_samples=10**6,
        schedule=Schedule.parse(schedule),
        lr=0.3,
        momentum=0.9,
        optimizer=OptimizerConfig(max_grad_norm=MAX_NORM),
        **kw,
    )


def worker_gradients(model, weights, batches) -> list[torch.Tensor]:
    loss_fn = torch.nn.functional.cross_entropy
    rows = []
    for x, y in batches:
        torch.nn.utils.vector_to_parameters(weights.clone(), model.parameters())
        model.zero_grad()
        loss_fn(model(x), y).backward()
        rows.append(flat_gradient(model).clone())
    return rows


def message(worker: int, step: int, version: int, values: torch.Tensor, **kw) -> Gradient:
    return Gradient(worker, step, version, values, BATCH, 0.0, 0.0, **kw)


def test_the_coefficient_is_clip_grad_norm_s() -> None:
    values = torch.tensor([3.0, 4.0])
    assert math.isclose(squared_norm(values), 25.0)
    assert clip_coefficient(5.0, 1.0) == pytest.approx(1.0 / (5.0 + 1e-6))
    assert clip_coefficient(0.5, 1.0) == 1.0
    assert clipped(values, 5.0, 10.0) is values  # not clipped: the same tensor, the same bits
    reference = values.clone().requires_grad_()
    reference.grad = values.clone()
    torch.nn.utils.clip_grad_norm_([reference], 1.0)
    torch.testing.assert_close(clipped(values, 5.0, 1.0), reference.grad)


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_bsp_with_clipping_equals_clip_grad_norm_then_sgd_on_the_full_batch(shards) -> None:
    """The oracle, over one shard or several exchanging their parts of the norm."""
    torch.manual_seed(0)
    model, reference = small_model(), small_model()
    reference.load_state_dict(model.state_dict())
    workers, steps = 4, 3
    initial = flatten_parameters(model)
    parts = parameter_shards(initial.numel(), shards)  # as the runtimes slice the weights
    syncs = [
        Synchronizer(
            config(workers=workers, shard=index, shards=shards),
            FlatSGD(initial[part].clone(), weight_decay=1e-3),
        )
        for index, part in enumerate(parts)
    ]
    sgd = torch.optim.SGD(reference.parameters(), lr=0.3, momentum=0.9, weight_decay=1e-3)
    loss_fn = torch.nn.functional.cross_entropy
    for step in range(steps):
        batches = [(torch.randn(BATCH, 5), torch.randint(0, 3, (BATCH,))) for _ in range(workers)]
        weights = torch.cat([s.optimizer.weights for s in syncs])
        rows = worker_gradients(model, weights, batches)
        outcomes: list[list[Outcome]] = [[] for _ in syncs]
        for worker, row in enumerate(rows):
            for index, (sync, part) in enumerate(zip(syncs, parts, strict=True)):
                values = row[part].clone()
                outcomes[index].append(
                    sync.submit(message(worker, step, sync.live.version, values))
                )
        # The runtime's part: each shard's partial to the others, the last shard's first.
        for index in reversed(range(shards)):
            for outcome in outcomes[index]:
                for partial in outcome.norm_partials:
                    for other, sync in enumerate(syncs):
                        if other != index:
                            released = receive_norm(sync, partial).released
                            outcomes[other].append(Outcome(released=released))
        for index, sync in enumerate(syncs):
            released = {w for o in outcomes[index] for w in o.released}
            assert released == set(range(workers)), f"shard {index} released {released}"
            assert sync.live.version == step + 1
        sgd.zero_grad()
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        loss_fn(reference(x), y).backward()
        assert torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM) > MAX_NORM
        sgd.step()
    weights = torch.cat([s.optimizer.weights for s in syncs])
    torch.testing.assert_close(weights, flatten_parameters(reference), rtol=1e-5, atol=1e-6)
    assert all(s.updater.exchange is None or s.updater.exchange.incomplete == 0 for s in syncs)


def test_a_round_waits_for_every_shard_s_norm_and_takes_none_from_a_round_done() -> None:
    base = config(workers=2, shard=0, shards=2)
    sync = Synchronizer(base, FlatSGD(torch.zeros(3)))
    peer = Synchronizer(replace(base, shard=1), FlatSGD(torch.zeros(3)))
    ones = torch.ones(3)
    sync.submit(message(0, 0, 0, ones.clone()))
    held = sync.submit(message(1, 0, 0, ones.clone()))
    assert held.released == [] and held.applied == [] and len(held.norm_partials) == 1
    assert sync.live.version == 0 and held.norm_partials[0].version == 1
    # A message arriving while the round is held joins the next one (a readmitted worker).
    peer.submit(message(0, 0, 0, ones.clone()))
    partial = peer.submit(message(1, 0, 0, ones.clone())).norm_partials[0]
    done = receive_norm(sync, partial)
    assert done.released == [0, 1] and sync.live.version == 1
    # The mean (1, 1, 1) on both shards: global norm sqrt(6), every coordinate scaled by it.
    expected = -0.3 * MAX_NORM / (math.sqrt(6) + 1e-6)
    torch.testing.assert_close(sync.optimizer.weights, torch.full((3,), expected))
    assert sync.updater.exchange is not None and sync.updater.exchange.incomplete == 0


def test_shards_whose_versions_drifted_apart_still_pair_their_rounds() -> None:
    """Rounds are told apart by when they come, not by version: a switch cut short one
    shard's round (more updates there), yet the next BSP rounds pair, exactly."""
    base = config("bsp", workers=2, shard=0, shards=2)
    sync = Synchronizer(base, FlatSGD(torch.zeros(3)))
    peer = Synchronizer(replace(base, shard=1), FlatSGD(torch.zeros(3)))
    sync.live.version = 7  # as after a different count of updates
    for step in range(2):
        sync.submit(message(0, step, sync.live.version, torch.ones(3)))
        mine = sync.submit(message(1, step, sync.live.version, torch.ones(3))).norm_partials
        peer.submit(message(0, step, peer.live.version, torch.ones(3)))
        theirs = peer.submit(message(1, step, peer.live.version, torch.ones(3))).norm_partials
        assert receive_norm(sync, theirs[0]).released == [0, 1]
        assert receive_norm(peer, mine[0]).released == [0, 1]
    torch.testing.assert_close(sync.optimizer.weights, peer.optimizer.weights)
    assert (sync.live.version, peer.live.version) == (9, 2)
    assert sync.updater.exchange is not None and sync.updater.exchange.incomplete == 0


def test_a_partial_for_a_round_cut_short_here_is_forgotten_at_the_next_update() -> None:
    base = config("bsp", workers=2, shard=0, shards=2)
    sync = Synchronizer(base, FlatSGD(torch.zeros(3)))
    peer = Synchronizer(replace(base, shard=1), FlatSGD(torch.zeros(3)))
    peer.submit(message(0, 0, 0, torch.ones(3)))
    stale = peer.submit(message(1, 0, 0, torch.ones(3))).norm_partials[0]
    sync.submit(message(0, 0, 0, torch.ones(3)))
    sync.switch_to(ASP, reason="test")  # cuts this shard's round short
    receive_norm(sync, stale)  # the peer's part of that round comes late
    sync.submit(message(1, 0, 0, torch.ones(3)))  # an ASP update
    assert sync.updater.exchange is not None and sync.updater.exchange.received == {}


def test_a_switch_reaching_a_held_round_applies_it_with_the_norms_at_hand() -> None:
    sync = Synchronizer(config(workers=2, shard=0, shards=2), FlatSGD(torch.zeros(3)))
    sync.submit(message(0, 0, 0, torch.ones(3)))
    sync.submit(message(1, 0, 0, torch.ones(3)))
    outcome = sync.switch_to(ASP, reason="test")
    assert sorted(outcome.released) == [0, 1] and sync.live.version == 1
    assert sync.updater.exchange is not None and sync.updater.exchange.incomplete == 1
    accounting = sync.accounting()
    assert accounting.applied == 2 and accounting.unaccounted == 0


def test_an_asp_gradient_is_clipped_by_its_worker_s_norm_on_every_shard() -> None:
    sync = Synchronizer(config("asp", workers=2, shard=1, shards=2), FlatSGD(torch.zeros(2)))
    values = torch.tensor([0.3, 0.4])  # this shard's slice; the whole gradient's norm is 10
    sync.submit(message(0, 0, 0, values.clone(), norm=10.0))
    lr = sync.live.lr_scale * 0.3 / 2  # an ASP update: one worker's share (async lr linear)
    expected = -lr * values * (MAX_NORM / (10.0 + 1e-6))
    torch.testing.assert_close(sync.optimizer.weights, expected)


def test_a_gradient_whose_worker_measured_a_non_finite_norm_is_dropped() -> None:
    sync = Synchronizer(config("asp", workers=2, shard=0, shards=2), FlatSGD(torch.zeros(2)))
    outcome = sync.submit(message(0, 0, 0, torch.ones(2), norm=math.inf))
    assert [d.reason for d in outcome.dropped] == ["non_finite"]
    assert torch.equal(sync.optimizer.weights, torch.zeros(2))


def test_without_clipping_nothing_is_held_or_measured() -> None:
    plain = replace(config(workers=2, shards=2), optimizer=OptimizerConfig())
    sync = Synchronizer(plain, FlatSGD(torch.zeros(3)))
    sync.submit(message(0, 0, 0, torch.ones(3)))
    outcome = sync.submit(message(1, 0, 0, torch.ones(3)))
    assert outcome.released == [0, 1] and outcome.norm_partials == []
    assert sync.updater.exchange is None


def test_each_inner_step_of_a_local_round_is_clipped() -> None:
    """A local round of H steps equals H steps of clip_grad_norm_ then the optimizer."""
    torch.manual_seed(1)
    model, reference = small_model(), small_model()
    reference.load_state_dict(model.state_dict())
    batches = [(torch.randn(BATCH, 5), torch.randint(0, 3, (BATCH,))) for _ in range(3)]
    feed = iter(batches)
    loss_fn = torch.nn.functional.cross_entropy

    def gradient(weights: np.ndarray) -> tuple[np.ndarray, float]:
        x, y = next(feed)
        torch.nn.utils.vector_to_parameters(torch.from_numpy(weights.copy()), model.parameters())
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return flat_gradient(model).numpy().copy(), float(loss.detach())

    pulled = flatten_parameters(model).numpy().copy()
    plan = LocalRound(
        steps=3, lr=0.2, momentum=0.9, weight_decay=0.0, epoch=0, keep_inner_state=False
    )
    delta, _ = InnerLoop(OptimizerConfig(max_grad_norm=MAX_NORM)).run(pulled, plan, gradient)
    sgd = torch.optim.SGD(reference.parameters(), lr=0.2, momentum=0.9)
    for x, y in batches:
        sgd.zero_grad()
        loss_fn(reference(x), y).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM)
        sgd.step()
    expected = torch.from_numpy(pulled) - flatten_parameters(reference)
    torch.testing.assert_close(torch.from_numpy(delta), expected, rtol=1e-5, atol=1e-7)


def test_a_peer_s_norm_that_arrives_first_waits_for_the_round() -> None:
    base = config(workers=2, shard=0, shards=2)
    sync = Synchronizer(base, FlatSGD(torch.zeros(3)))
    peer = Synchronizer(replace(base, shard=1), FlatSGD(torch.zeros(3)))
    peer.submit(message(0, 0, 0, torch.ones(3)))
    partial = peer.submit(message(1, 0, 0, torch.ones(3))).norm_partials[0]
    assert receive_norm(sync, partial).released == []  # no round here yet
    sync.submit(message(0, 0, 0, torch.ones(3)))
    done = sync.submit(message(1, 0, 0, torch.ones(3)))
    assert done.released == [0, 1] and len(done.norm_partials) == 1
    assert receive_norm(peer, done.norm_partials[0]).released == [0, 1]
    torch.testing.assert_close(sync.optimizer.weights, peer.optimizer.weights)
