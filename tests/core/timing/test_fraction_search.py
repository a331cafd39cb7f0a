"""The switch-point search, driven by scripted accuracies (no training, no Ray)."""

from collections.abc import Callable

import pytest

from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.timing.fraction_search import (
    BASELINE,
    SearchSpec,
    SearchSpecError,
    StepKind,
    StopReason,
    TrialKey,
    format_fraction,
    fraction_label,
    next_step,
    schedule_for,
)


def drive(spec: SearchSpec, accuracy: Callable[[TrialKey], float]):
    """Run the search to its decision; return it with the batches of trials it asked for."""
    results: dict[TrialKey, float] = {}
    batches = []
    while True:
        step = next_step(spec, results)
        if step.kind is StepKind.DECIDE:
            return step.decision, batches
        assert step.trials, "a RUN step must name trials"
        batches.append(step.trials)
        for key in step.trials:
            assert key not in results, "a finished trial is never asked for again"
            results[key] = accuracy(key)


def threshold(at: float, good: float = 0.96, bad: float = 0.90):
    return lambda key: good if key.fraction >= at else bad


def tried(decision) -> list[str]:
    return [format_fraction(e.fraction) for e in decision.evidence]


def test_first_step_asks_for_baseline_and_first_fraction_together() -> None:
    step = next_step(SearchSpec(repeats=2, base_seed=7), {})
    assert step.kind is StepKind.RUN
    assert set(step.trials) == {
        TrialKey(1.0, 7),
        TrialKey(1.0, 8),
        TrialKey(0.5, 7),
        TrialKey(0.5, 8),
    }


def test_halves_while_accuracy_holds_down_to_the_resolution() -> None:
    decision, _ = drive(SearchSpec(repeats=2, resolution=1 / 64), threshold(0.0))
    assert tried(decision) == ["1/2", "1/4", "1/8", "1/16", "1/32", "1/64"]
    assert decision.fraction == 1 / 64 and decision.stop is StopReason.RESOLUTION
    assert decision.trials_used == 14 and decision.repeats == 2
    assert "1/64" in decision.reason and "2 repeats" in decision.reason


def test_refines_between_last_failing_and_last_holding_fraction() -> None:
    # Holds from 0.1 up: 1/16 fails, then bisection: 3/32 fails, 7/64 holds, gap 1/64 = stop.
    decision, _ = drive(SearchSpec(repeats=1, resolution=1 / 64), threshold(0.1))
    assert tried(decision) == ["1/2", "1/4", "1/8", "1/16", "3/32", "7/64"]
    assert decision.fraction == 7 / 64 and decision.stop is StopReason.BRACKET
    assert decision.schedule == "bsp:0.109375,asp"
    assert "3/32 fell short" in decision.reason and "7/64" in decision.reason
    assert [e.holds for e in decision.evidence] == [True, True, True, False, False, True]


def test_stays_with_bsp_when_no_smaller_fraction_holds() -> None:
    decision, _ = drive(SearchSpec(repeats=1, resolution=1 / 8), threshold(1.0))
    assert tried(decision) == ["1/2", "3/4", "7/8"]
    assert decision.fraction == BASELINE and decision.schedule == "bsp"
    assert "stays with BSP" in decision.reason


def test_decides_on_the_mean_of_repeats_within_the_tolerance() -> None:
    # BSP mean 96.0; 1/2 has one repeat 0.8 points low and one 0.2 high: mean 0.3 low, holds
    # at tolerance 0.5. 1/4's mean is 0.6 low: fails.
    table = {
        (1.0, 0): 0.960,
        (1.0, 1): 0.960,
        (0.5, 0): 0.952,
        (0.5, 1): 0.962,
        (0.25, 0): 0.956,
        (0.25, 1): 0.952,
    }
    spec = SearchSpec(repeats=2, resolution=1 / 4, tolerance_points=0.5)
    decision, _ = drive(spec, lambda k: table[(k.fraction, k.seed)])
    assert decision.fraction == 0.5
    half, quarter = decision.evidence
    assert half.holds and half.below_bsp_points == pytest.approx(0.3)
    assert not quarter.holds and quarter.below_bsp_points == pytest.approx(0.6)


def test_budget_stops_with_the_best_holding_fraction_so_far() -> None:
    spec = SearchSpec(repeats=2, max_trials=8, resolution=1 / 64)
    decision, batches = drive(spec, threshold(0.0))
    assert sum(len(b) for b in batches) == 8 and decision.trials_used == 8
    assert decision.fraction == 1 / 8 and decision.stop is StopReason.BUDGET
    assert "budget (8)" in decision.reason


def test_replay_uses_only_its_own_path_and_resumes_where_it_stopped() -> None:
    spec = SearchSpec(repeats=2, resolution=1 / 16)
    accuracy = threshold(0.2)
    full, batches = drive(spec, accuracy)
    # Interrupted after two batches, plus unrelated trials (another seed, another fraction):
    partial = {k: accuracy(k) for batch in batches[:2] for k in batch}
    partial[TrialKey(0.5, 99)] = 0.0
    partial[TrialKey(0.3, 0)] = 0.0
    step = next_step(spec, partial)
    assert step.kind is StepKind.RUN and step.trials == batches[2]
    results = dict(partial)
    while (step := next_step(spec, results)).kind is StepKind.RUN:
        results.update({k: accuracy(k) for k in step.trials})
    assert step.decision == full


def test_a_partly_finished_fraction_asks_only_for_its_missing_repeats() -> None:
    spec = SearchSpec(repeats=3)
    results = {TrialKey(1.0, s): 0.9 for s in range(3)} | {TrialKey(0.5, 1): 0.9}
    step = next_step(spec, results)
    assert step.trials == (TrialKey(0.5, 0), TrialKey(0.5, 2))


def test_nan_accuracy_never_holds() -> None:
    decision, _ = drive(
        SearchSpec(repeats=1, resolution=1 / 4),
        lambda k: float("nan") if k.fraction == 0.5 else 0.95,
    )
    assert not decision.evidence[0].holds and decision.fraction == 0.75


def test_decision_record_is_json_ready() -> None:
    import json

    decision, _ = drive(SearchSpec(repeats=1, resolution=1 / 8), threshold(0.2))
    record = json.loads(json.dumps(decision.to_plain()))
    assert record["label"] == "1/4" and record["stop"] == "bracket"
    assert [t["label"] for t in record["tried"]] == ["1/2", "1/4", "1/8"]


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"tolerance_points": -1}, "tolerance = -1"),
        ({"repeats": 0}, "repeats = 0"),
        ({"resolution": 0.75}, "resolution = 0.75"),
        ({"resolution": 1e-6}, "[1/4096, 1/2]"),
        ({"max_trials": 3, "repeats": 2}, "at least 2 x repeats = 4"),
    ],
)
def test_bad_settings_name_the_value_and_what_is_allowed(values, fragment) -> None:
    with pytest.raises(SearchSpecError) as error:
        SearchSpec(**values)
    assert fragment in str(error.value)


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.25, 3 / 32, 7 / 64, 1 / 4096])
def test_fraction_forms_are_exact_and_schedules_parse(fraction: float) -> None:
    assert float(fraction_label(fraction)) == fraction
    schedule = Schedule.parse(schedule_for(fraction))
    assert schedule.phases[0].end == fraction or fraction == 1.0
    assert format_fraction(3 / 32) == "3/32" and format_fraction(1.0) == "1"


def test_an_online_share_is_shown_as_a_decimal_and_a_search_share_as_a_fraction() -> None:
    assert format_fraction(0.3582) == "0.3582"  # an online run's share, as stored
    assert format_fraction(0.8768) == "0.8768"  # 548/625: small, but not a search's
    assert format_fraction(0.2) == "0.2"
    assert format_fraction(3 / 4096) == "3/4096"  # the finest a search goes
