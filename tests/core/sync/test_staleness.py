"""Staleness-aware ASP (core/sync/staleness.py) against hand-computed updates: a scripted
sequence of stale gradients driven through the synchronizer, the weights and the recorded
learning rates compared with the rules written out here, step by step."""

import pytest
import torch

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.records import Gradient, UpdateRecord
from syncswitch.core.sync.staleness import (
    StalenessConfig,
    StalenessLr,
    WeightsHandedOut,
    compensate,
    staleness_lr_factor,
)
from syncswitch.core.sync.synchronizer import Synchronizer

WORKERS = 3
LR = 0.3  # one BSP update's; an ASP update's is LR / WORKERS = 0.1 (linear scaling)
ASP_LR = LR / WORKERS
INITIAL = torch.tensor([0.5, -1.0, 2.0, 0.25])

# (worker, version it computed on): worker 2 is a straggler whose first gradient arrives 6
# versions late, the others alternate. Each computed_version is the version the synchronizer
# handed that worker (in ASP: the one right after its previous gradient was applied).
SCRIPT = [(0, 0), (1, 0), (0, 1), (1, 2), (0, 3), (1, 4), (2, 0), (0, 5), (2, 7)]
STALENESS = [0, 1, 1, 1, 1, 1, 6, 2, 1]


def values(step: int, worker: int) -> torch.Tensor:
    """A gradient with every sign and size, different at every step."""
    return torch.tensor([1.0 + step, -0.5 * (worker + 1), 0.3 * (step - worker), 2.0 - step])


def make_sync(
    schedule: str = "asp", *, momentum: float = 0.0, staleness: StalenessConfig | None = None
) -> Synchronizer:
    config = SyncConfig(
        workers=WORKERS,
        total_samples=10**6,
        schedule=Schedule.parse(schedule),
        lr=LR,
        momentum=momentum,
        momentum_policy=MomentumPolicy.KEEP,
        staleness=staleness or StalenessConfig(),
    )
    return Synchronizer(config, FlatSGD(INITIAL.clone()))


def gradient(step: int, worker: int, version: int) -> Gradient:
    return Gradient(
        worker=worker,
        sequence=step,
        computed_version=version,
        values=values(step, worker),
        samples=4,
        loss=1.0,
        step_time_s=0.01,
    )


def run_script(sync: Synchronizer) -> list[UpdateRecord]:
    records = []
    for step, (worker, version) in enumerate(SCRIPT):
        outcome = sync.submit(gradient(step, worker, version))
        assert outcome.released == [worker]  # ASP: it goes on at once, with the newest weights
        records += outcome.applied
    assert [r.staleness for r in records] == STALENESS
    return records


def by_hand(*, floor: float | None, lam: float, momentum: float = 0.0) -> torch.Tensor:
    """The script's weights, the rules written out: w_v is the weights of version v."""
    weights = [INITIAL.clone()]
    buffer = None
    for step, (worker, version) in enumerate(SCRIPT):
        now = weights[-1]
        tau = len(weights) - 1 - version
        factor = 1.0 if floor is None or tau <= 1 else max(1.0 / tau, floor)
        g = values(step, worker)
        g = g + lam * g * g * (now - weights[version])
        if momentum:
            buffer = g.clone() if buffer is None else buffer * momentum + g
            g = buffer
        weights.append(now - ASP_LR * factor * g)
    return weights[-1]


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-7)


# -- the pure functions --------------------------------------------------------------------


def test_the_inverse_factor_divides_by_staleness_down_to_the_floor() -> None:
    inverse = StalenessLr.INVERSE
    assert [staleness_lr_factor(inverse, tau, 0.1) for tau in (0, 1, 2, 4, 10)] == [
        1.0,
        1.0,
        0.5,
        0.25,
        0.1,
    ]
    assert staleness_lr_factor(inverse, 20, 0.1) == 0.1  # the floor, not 1/20
    assert staleness_lr_factor(StalenessLr.NONE, 20, 0.1) == 1.0


def test_compensation_is_dc_asgd_and_leaves_its_input_alone() -> None:
    g = torch.tensor([2.0, -1.0, 0.5])
    now, stale = torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0.0, 3.0, 1.0])
    out = compensate(g, now, stale, 0.5)
    # g + 0.5 * g^2 * (now - stale): [2 + 0.5*4*1, -1 + 0.5*1*(-2), 0.5 + 0]
    assert out.tolist() == [4.0, -2.0, 0.5]
    assert g.tolist() == [2.0, -1.0, 0.5]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="lr_floor"):
        StalenessConfig(lr_floor=0.0)
    with pytest.raises(ValueError, match="lr_floor"):
        StalenessConfig(lr_floor=1.5)
    with pytest.raises(ValueError, match="delay_compensation"):
        StalenessConfig(delay_compensation=-0.1)


def test_one_copy_per_version_held_and_none_once_nobody_holds_it() -> None:
    handed = WeightsHandedOut(4, 0, torch.zeros(10))
    assert handed.held_bytes == 40 and handed.worst_case_bytes == 4 * 10 * 4
    handed.handed([0], 1, torch.ones(10))
    handed.handed([1], 2, torch.full((10,), 2.0))
    assert handed.held_bytes == 3 * 40  # versions 0 (workers 2, 3), 1 and 2
    handed.handed([2, 3], 3, torch.full((10,), 3.0))
    assert handed.held_bytes == 3 * 40  # version 0 let go
    weights = handed.weights_of(1, 2)
    assert weights is not None and weights.tolist() == [2.0] * 10
    assert handed.weights_of(1, 1) is None  # worker 1 was not handed version 1


# -- the oracle: scripted stale gradients ---------------------------------------------------


def test_plain_asp_applies_every_gradient_at_the_asp_lr() -> None:
    sync = make_sync()
    records = run_script(sync)
    assert [r.lr for r in records] == [pytest.approx(ASP_LR)] * len(SCRIPT)
    close(sync.optimizer.weights, by_hand(floor=None, lam=0.0))


@pytest.mark.parametrize("floor", [0.1, 0.25])
def test_inverse_lr_divides_each_gradient_by_its_staleness(floor: float) -> None:
    sync = make_sync(staleness=StalenessConfig(StalenessLr.INVERSE, lr_floor=floor))
    records = run_script(sync)
    # Staleness 6 is 1/6 (above a 0.1 floor, below 0.25); 2 is a half; 0 and 1 keep lr.
    expected = [1, 1, 1, 1, 1, 1, max(1 / 6, floor), 0.5, 1]
    assert [r.lr for r in records] == pytest.approx([ASP_LR * f for f in expected])
    close(sync.optimizer.weights, by_hand(floor=floor, lam=0.0))
    assert not torch.allclose(sync.optimizer.weights, by_hand(floor=None, lam=0.0))


def test_delay_compensation_corrects_each_stale_gradient_by_the_weights_it_missed() -> None:
    sync = make_sync(staleness=StalenessConfig(delay_compensation=0.04))
    records = run_script(sync)
    assert [r.lr for r in records] == [pytest.approx(ASP_LR)] * len(SCRIPT)
    close(sync.optimizer.weights, by_hand(floor=None, lam=0.04))
    assert not torch.allclose(sync.optimizer.weights, by_hand(floor=None, lam=0.0), atol=1e-4)
    assert sync.updater.staleness.uncompensated == 0


def test_both_rules_with_momentum_match_torch_sgd_stepped_by_hand() -> None:
    rules = StalenessConfig(StalenessLr.INVERSE, lr_floor=0.1, delay_compensation=0.5)
    sync = make_sync(momentum=0.9, staleness=rules)
    records = run_script(sync)
    close(sync.optimizer.weights, by_hand(floor=0.1, lam=0.5, momentum=0.9))
    # And torch.optim.SGD, fed the compensated gradients at the recorded learning rates.
    param = torch.nn.Parameter(INITIAL.clone())
    sgd = torch.optim.SGD([param], lr=1.0, momentum=0.9)
    history = [INITIAL.clone()]
    for step, ((worker, version), record) in enumerate(zip(SCRIPT, records, strict=True)):
        g = values(step, worker)
        param.grad = compensate(g, param.detach(), history[version], 0.5)
        sgd.param_groups[0]["lr"] = record.lr
        sgd.step()
        history.append(param.detach().clone())
    close(sync.optimizer.weights, param.detach())


def test_a_gradient_on_weights_the_server_did_not_hand_out_is_applied_uncompensated() -> None:
    sync = make_sync(staleness=StalenessConfig(delay_compensation=0.5))
    sync.submit(gradient(0, 0, 0))
    before = sync.optimizer.weights.clone()
    # Worker 1 was handed version 0, yet says version 1 (it pulled the weights elsewhere).
    sync.submit(gradient(1, 1, 1))
    close(sync.optimizer.weights, before - ASP_LR * values(1, 1))
    assert sync.updater.staleness.uncompensated == 0  # staleness 0: nothing to compensate
    sync.submit(gradient(2, 2, 1))  # handed 0, says 1, staleness 1
    assert sync.updater.staleness.uncompensated == 1


def test_bsp_rounds_are_untouched_by_the_rules() -> None:
    rules = StalenessConfig(StalenessLr.INVERSE, lr_floor=0.1, delay_compensation=1.0)
    plain, ruled = make_sync("bsp", momentum=0.9), make_sync("bsp", momentum=0.9, staleness=rules)
    for sync in (plain, ruled):
        for step in range(3):
            for worker in range(WORKERS):
                sync.submit(gradient(step, worker, sync.live.version))
    assert torch.equal(plain.optimizer.weights, ruled.optimizer.weights)
    assert ruled.live.version == 3


def test_ssp_is_staleness_aware_too() -> None:
    sync = make_sync("ssp-3", staleness=StalenessConfig(StalenessLr.INVERSE))
    records = []
    for step, (worker, version) in enumerate(SCRIPT[:7]):
        records += sync.submit(gradient(step, worker, version)).applied
    assert records[-1].staleness == 6 and records[-1].lr == pytest.approx(ASP_LR / 6)


def test_a_restored_server_compensates_against_the_restored_weights() -> None:
    rules = StalenessConfig(delay_compensation=0.5)
    first = make_sync(staleness=rules)
    run_script(first)
    state = first.snapshot("checkpoint").state
    restored = make_sync(staleness=rules)
    restored.restore(state)
    for worker in range(WORKERS):
        restored.rejoin(worker)
    at = state.version
    w_restored = state.optimizer.weights.clone()
    restored.submit(gradient(100, 0, at))  # fresh
    g0 = values(100, 0)
    after_first = w_restored - ASP_LR * g0
    restored.submit(gradient(101, 1, at))  # one version stale, computed on the restored weights
    g1 = values(101, 1)
    g1 = g1 + 0.5 * g1 * g1 * (after_first - w_restored)
    close(restored.optimizer.weights, after_first - ASP_LR * g1)
    assert restored.updater.staleness.uncompensated == 0


def test_after_a_rollback_the_workers_are_compensated_against_the_restored_weights() -> None:
    sync = make_sync(staleness=StalenessConfig(delay_compensation=0.5))
    for step, (worker, version) in enumerate(SCRIPT[:4]):
        sync.submit(gradient(step, worker, version))
    state = sync.snapshot("checkpoint").state
    for step, (worker, version) in enumerate(SCRIPT[4:7], start=4):
        sync.submit(gradient(step, worker, version))
    sync.roll_back(
        state, protocol=ASP, lr_scale=1.0, momentum_policy=MomentumPolicy.KEEP, reason="test"
    )
    restored, at = state.optimizer.weights.clone(), sync.live.version
    # Computed on the abandoned weights: dropped, and each worker goes on with the restored.
    for worker, version in ((0, 5), (1, 6)):
        outcome = sync.submit(gradient(20 + worker, worker, version))
        assert outcome.applied == [] and outcome.released == [worker]
    sync.submit(gradient(30, 0, at))
    after_first = restored - ASP_LR * values(30, 0)
    sync.submit(gradient(31, 1, at))  # one version stale, computed on the restored weights
    g = values(31, 1)
    close(
        sync.optimizer.weights, after_first - ASP_LR * (g + 0.5 * g * g * (after_first - restored))
    )
    assert sync.updater.staleness.uncompensated == 0
