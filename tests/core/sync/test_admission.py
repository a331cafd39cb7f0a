import random

import numpy as np
import pytest
import torch

from syncswitch.core.reliability.checkpoints import check_plain
from syncswitch.core.sync.admission import (
    DropReason,
    GradientLedger,
    LedgerError,
    check_gradient,
    describe_problem,
    gradient_problem,
)
from syncswitch.core.sync.quarantine import Quarantine, QuarantinePolicy

N = 5_210

# -- admission -------------------------------------------------------------------------------


def test_a_good_gradient_is_admitted() -> None:
    assert gradient_problem(torch.randn(N), N) is None
    assert gradient_problem(torch.randn(N, dtype=torch.float64), N) is None
    assert gradient_problem(torch.zeros(0), 0) is None


@pytest.mark.parametrize(
    "values",
    [
        torch.randn(N - 1),
        torch.randn(N + 1),
        torch.randn(2, N // 2),
        torch.tensor(1.0),
        torch.ones(N, dtype=torch.int64),
        torch.ones(N, dtype=torch.bool),
        np.zeros(N, dtype=np.float32),
        [0.0] * N,
        None,
    ],
)
def test_wrong_shape_or_type_is_a_shape_mismatch(values) -> None:
    assert gradient_problem(values, N) == DropReason.SHAPE_MISMATCH
    assert "expected" in describe_problem(values, N)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", [0, N // 2, N - 1])
def test_any_non_finite_value_is_caught(bad, where) -> None:
    values = torch.randn(N)
    values[where] = bad
    assert gradient_problem(values, N) == DropReason.NON_FINITE


def test_both_infinities_together_are_caught() -> None:
    values = torch.randn(N)
    values[1], values[2] = float("inf"), float("-inf")
    assert gradient_problem(values, N) == DropReason.NON_FINITE
    assert describe_problem(values, N) == f"gradient has 2 non-finite values of {N} (0 NaN, 2 inf)"


def test_overflowing_sum_of_finite_values_is_not_refused() -> None:
    """The fast path sums; a sum that overflows must be re-checked, not taken as non-finite."""
    values = torch.full((N,), 3.0e38)
    assert not torch.isfinite(values.sum())
    assert gradient_problem(values, N) is None
    half = torch.full((N,), 60_000.0, dtype=torch.float16)
    assert gradient_problem(half, N) is None


def test_the_check_squares_the_values_when_asked_and_only_then() -> None:
    values = torch.randn(N, dtype=torch.float64)
    problem, square = check_gradient(values, N, squared=True)
    assert problem is None
    assert square == pytest.approx(float((values**2).sum()), rel=1e-12)
    assert check_gradient(values, N) == (None, None)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_squaring_still_catches_every_non_finite_value(bad) -> None:
    values = torch.randn(N)
    values[N // 3] = bad
    assert check_gradient(values, N, squared=True) == (DropReason.NON_FINITE, None)


def test_finite_values_whose_square_overflows_are_admitted_without_a_square() -> None:
    values = torch.full((N,), 1.0e20)  # finite; its squares are not in float32
    assert check_gradient(values, N, squared=True) == (None, None)
    assert check_gradient(torch.randn(N - 1), N, squared=True) == (DropReason.SHAPE_MISMATCH, None)


def test_problem_reasons_are_the_drop_reasons() -> None:
    assert DropReason.NON_FINITE == "non_finite"
    assert {r.value for r in DropReason} >= {
        "non_finite",
        "shape_mismatch",
        "worker_died",
        "stale_beyond_bound",
        "straggler_excluded",
        "switch",
        "training_complete",
        "duplicate",
        "quarantined",
    }


# -- the ledger ------------------------------------------------------------------------------


def _identity_holds(ledger: GradientLedger) -> None:
    assert ledger.unaccounted() == 0
    assert ledger.sent == ledger.applied + ledger.dropped + ledger.in_flight


def test_in_order_arrivals_keep_constant_memory() -> None:
    ledger = GradientLedger()
    for q in range(1_000):
        for w in range(4):
            assert ledger.record_arrival(w, q) is None
            ledger.record_applied(w, q)
    seqs = ledger._workers[2]
    assert (seqs.high, seqs.ahead, seqs.retired) == (1_000, set(), set())
    assert ledger.summary() == {
        "sent": 4_000,
        "applied": 4_000,
        "dropped": {},
        "dropped_total": 0,
        "in_flight": 0,
        "unaccounted": 0,
    }
    assert ledger.next_sequence(2) == 1_000 and ledger.next_sequence(9) == 0


def test_out_of_order_arrivals_are_absorbed_into_the_high_water_mark() -> None:
    ledger = GradientLedger()
    order = [0, 2, 3, 1, 5, 4, 7, 6]
    for q in order:
        assert ledger.record_arrival(0, q) is None
    seqs = ledger._workers[0]
    assert (seqs.high, seqs.ahead) == (8, set())
    assert all(ledger.seen(0, q) for q in range(8))
    assert not ledger.seen(0, 8) and not ledger.seen(1, 0)
    assert ledger.in_flight == 8


def test_a_retry_is_dropped_as_duplicate_in_flight_or_settled() -> None:
    ledger = GradientLedger()
    assert ledger.record_arrival(3, 0) is None
    assert ledger.record_arrival(3, 0) == DropReason.DUPLICATE  # original still in flight
    ledger.record_applied(3, 0)
    assert ledger.record_arrival(3, 0) == DropReason.DUPLICATE  # original applied
    assert ledger.record_arrival(3, 2) is None
    ledger.record_dropped(3, 2, DropReason.SWITCH)
    assert ledger.record_arrival(3, 2) == DropReason.DUPLICATE  # original dropped
    assert ledger.sent == 5 and ledger.applied == 1
    assert ledger.dropped_by_reason == {"duplicate": 3, "switch": 1}
    _identity_holds(ledger)


def test_settling_twice_or_without_arrival_is_a_ledger_error() -> None:
    ledger = GradientLedger()
    ledger.record_arrival(0, 0)
    ledger.record_applied(0, 0)
    with pytest.raises(LedgerError, match="is already settled; each gradient is settled exactly"):
        ledger.record_applied(0, 0)
    with pytest.raises(LedgerError, match="was never recorded as arrived"):
        ledger.record_dropped(0, 1, DropReason.NON_FINITE)
    ledger.record_arrival(0, 1)
    with pytest.raises(ValueError, match="'bogus' is not a valid DropReason"):
        ledger.record_dropped(0, 1, "bogus")
    with pytest.raises(ValueError, match="sequence -1 of worker 0 must be an int >= 0"):
        ledger.record_arrival(0, -1)


def test_scripted_run_with_every_kind_of_outcome_adds_up() -> None:
    rng = random.Random(4)
    ledger = GradientLedger()
    reasons = [r for r in DropReason if r not in (DropReason.DUPLICATE, DropReason.WORKER_DIED)]
    next_q = [0] * 6
    for _ in range(3_000):
        w = rng.randrange(6)
        q = next_q[w]
        next_q[w] += 1
        ledger.record_arrival(w, q)
        if rng.random() < 0.1:
            ledger.record_arrival(w, q)  # a retry
        if rng.random() < 0.2:
            ledger.record_dropped(w, q, rng.choice(reasons))
        elif rng.random() < 0.95:
            ledger.record_applied(w, q)
        _identity_holds(ledger)
    assert ledger.in_flight > 0 and ledger.dropped_by_reason[DropReason.DUPLICATE] > 0
    dropped = ledger.drop_in_flight(DropReason.TRAINING_COMPLETE)
    assert len(dropped) > 0 and ledger.in_flight == 0
    _identity_holds(ledger)
    assert all(s.ahead == set() for s in ledger._workers.values())


def test_drop_in_flight_of_one_worker() -> None:
    ledger = GradientLedger()
    for w, q in [(0, 0), (1, 0), (1, 1), (2, 0)]:
        ledger.record_arrival(w, q)
    assert ledger.drop_in_flight(DropReason.WORKER_DIED, worker=1) == [(1, 0), (1, 1)]
    assert ledger.in_flight_of(1) == [] and ledger.in_flight == 2
    assert ledger.drop_in_flight(DropReason.ROLLED_BACK) == [(0, 0), (2, 0)]
    assert ledger.dropped_by_reason == {"worker_died": 2, "rolled_back": 2}
    _identity_holds(ledger)


def test_a_lost_gradient_is_counted_and_a_late_copy_is_a_duplicate() -> None:
    ledger = GradientLedger()
    ledger.record_arrival(0, 0)
    ledger.record_applied(0, 0)
    ledger.record_lost(0, 1)  # the call carrying it failed
    assert ledger.sent == 2 and ledger.dropped_by_reason == {"worker_died": 1}
    assert ledger.record_arrival(0, 1) == DropReason.DUPLICATE
    with pytest.raises(LedgerError, match="already arrived; it cannot also be lost"):
        ledger.record_lost(0, 0)
    _identity_holds(ledger)


def test_restart_retires_gaps_and_late_arrivals_from_the_old_incarnation() -> None:
    ledger = GradientLedger()
    for q in (0, 1, 2, 5, 7):  # 3, 4 and 6 are still on the wire when the worker dies
        ledger.record_arrival(1, q)
        ledger.record_applied(1, q)
    assert ledger.restart_worker(1) == 8
    seqs = ledger._workers[1]
    assert (seqs.high, seqs.ahead, seqs.retired) == (8, set(), {3, 4, 6})
    assert ledger.record_arrival(1, 4) == DropReason.WORKER_DIED  # late, from the old process
    assert ledger.record_arrival(1, 4) == DropReason.DUPLICATE  # and its retry
    assert ledger.record_arrival(1, 5) == DropReason.DUPLICATE  # was applied before
    assert ledger.record_arrival(1, 8) is None  # the new incarnation
    assert ledger.seen(1, 4) and not ledger.seen(1, 3)
    assert ledger.restart_worker(7) == 0
    _identity_holds(ledger)


def test_the_data_position_counts_a_local_rounds_batches_once_and_survives_a_checkpoint():
    ledger = GradientLedger()
    ledger.record_arrival(0, 0)  # a gradient: one batch
    ledger.record_arrival(0, 1, batches=4)  # a local round's delta: four batches
    assert ledger.record_arrival(0, 1, batches=4) == DropReason.DUPLICATE  # its retry
    ledger.record_arrival(0, 2, batches=4)
    assert ledger.next_sequence(0) == 3 and ledger.data_position(0) == 9
    assert ledger.data_position(5) == 0  # never heard of: from the start
    before = ledger.to_plain()
    assert before["workers"]["0"]["extra_batches"] == 6
    assert ledger.restart_worker(0) == 3 and ledger.data_position(0) == 9
    # A late delta of the replaced incarnation is not drawn by the new one: not counted.
    ledger.record_arrival(0, 7, batches=4)  # the new incarnation jumps ahead (a gap)
    ledger.restart_worker(0)
    assert ledger.record_arrival(0, 5, batches=4) == DropReason.WORKER_DIED
    assert ledger.data_position(0) == 8 + 9
    restored = GradientLedger.from_plain(ledger.to_plain())
    assert restored.data_position(0) == ledger.data_position(0)
    # A checkpoint without the key (every run before local phases) reads as one per sequence.
    del before["workers"]["0"]["extra_batches"]
    assert GradientLedger.from_plain(before).data_position(0) == 3
    before["workers"]["0"]["extra_batches"] = -1
    with pytest.raises(ValueError, match="extra_batches must be >= 0"):
        GradientLedger.from_plain(before)


def test_state_round_trip_is_plain_and_drops_what_was_in_flight() -> None:
    ledger = GradientLedger()
    for q in (0, 1, 3):
        ledger.record_arrival(0, q)
    ledger.record_applied(0, 0)
    ledger.record_dropped(0, 1, DropReason.NON_FINITE)
    ledger.record_arrival(2, 0)
    ledger.record_applied(2, 0)
    state = ledger.to_plain()
    check_plain({"ledger": state})
    restored = GradientLedger.from_plain(state)
    assert restored.sent == 4 and restored.applied == 2 and restored.in_flight == 0
    assert restored.dropped_by_reason == {"non_finite": 1, "rolled_back": 1}
    assert restored.seen(0, 3) and not restored.seen(0, 2)
    assert restored.next_sequence(0) == 4 and restored.next_sequence(2) == 1
    _identity_holds(restored)
    state["sent"] = 99
    with pytest.raises(LedgerError, match="does not add up: sent 99"):
        GradientLedger.from_plain(state)


# -- quarantine ------------------------------------------------------------------------------


def test_three_bad_in_a_row_quarantine_once_and_name_what_was_sent() -> None:
    policy = QuarantinePolicy(max_consecutive_bad=3)
    verdicts = [None, "non_finite", "shape_mismatch", "non_finite"]
    decisions = [policy.observe(5, v) for v in verdicts]
    assert decisions[:3] == [None, None, None]
    decision = decisions[3]
    assert decision == Quarantine(
        worker=5,
        reason=(
            "worker 5 sent 3 bad gradients in a row (non_finite x2, shape_mismatch x1); "
            "quarantined until it is restarted"
        ),
        bad_count=3,
        problems={"non_finite": 2, "shape_mismatch": 1},
    )
    assert policy.is_quarantined(5) and policy.quarantined == {5}
    # Stays quarantined, and quiet, however it behaves; the policy never releases by itself.
    assert [policy.observe(5, v) for v in [None, None, "non_finite"] * 5] == [None] * 15
    assert policy.is_quarantined(5)
    record = decision.to_decision(time_s=1.5, progress=0.25).to_plain()
    assert record["action"] == "quarantine" and record["worker"] == 5
    assert record["reason"] == decision.reason


def test_good_gradients_break_the_streak_and_other_workers_are_independent() -> None:
    policy = QuarantinePolicy(max_consecutive_bad=3)
    script = [(0, "non_finite"), (1, "non_finite"), (0, "non_finite"), (0, None)]
    script += [(0, "non_finite"), (0, "non_finite"), (1, None), (1, "non_finite")]
    assert [policy.observe(w, v) for w, v in script] == [None] * len(script)
    assert policy.quarantined == frozenset()
    assert policy.observe(0, "non_finite") is not None
    assert policy.quarantined == {0}


def test_total_limit_catches_a_worker_that_alternates() -> None:
    policy = QuarantinePolicy(max_consecutive_bad=3, max_total_bad=4)
    decisions = [policy.observe(2, v) for v in ["non_finite", None] * 4]
    assert decisions[:6] == [None] * 6
    assert decisions[6] is not None and decisions[6].bad_count == 4
    assert "since it was last admitted (limit 4)" in decisions[6].reason
    assert decisions[6].problems == {"non_finite": 4}


def test_release_gives_a_clean_record() -> None:
    policy = QuarantinePolicy(max_consecutive_bad=2)
    policy.observe(1, "non_finite")
    assert policy.observe(1, "non_finite") is not None
    policy.release(1)
    assert not policy.is_quarantined(1)
    assert policy.observe(1, "non_finite") is None  # the streak starts over
    assert policy.observe(1, "non_finite") is not None


def test_quarantine_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_consecutive_bad 0 must be an int >= 1"):
        QuarantinePolicy(max_consecutive_bad=0)
    with pytest.raises(ValueError, match=r"max_total_bad 2 must be None or an int >= .* \(3\)"):
        QuarantinePolicy(max_consecutive_bad=3, max_total_bad=2)
