from collections.abc import Callable

import pytest

from syncswitch.core.cluster.emulation import EmulationConfig, StepTimeModel
from syncswitch.core.stragglers.detector import (
    DetectorConfig,
    StragglerDetector,
    StragglerEvent,
    max_stragglers,
    slowdown_ratio,
)

BASE_S = 0.020
WORKERS = 8


def test_slowdown_ratio_uses_the_median_of_the_others() -> None:
    assert slowdown_ratio(0.1, [0.02, 0.02, 0.02]) == pytest.approx(5.0)
    # One very slow peer does not move the reference.
    assert slowdown_ratio(0.02, [0.02, 0.02, 1.0]) == pytest.approx(1.0)
    assert slowdown_ratio(0.1, []) == 1.0
    assert slowdown_ratio(0.1, [0.0, 0.0]) == 1.0


def test_at_most_half_the_workers() -> None:
    assert [max_stragglers(n) for n in (1, 2, 3, 8, 9)] == [0, 1, 1, 4, 4]


def _run(
    detector: StragglerDetector,
    rounds: range,
    factor: Callable[[int, int], float],
    log: list[tuple[int, int, StragglerEvent]],
) -> None:
    """Round-robin steps: every worker steps once per round at BASE_S x factor(worker, round)."""
    for r in rounds:
        for w in range(WORKERS):
            for event in detector.observe(w, BASE_S * factor(w, r), r * 0.1, r / 1000):
                log.append((r, w, event))
            assert len(detector.stragglers) <= WORKERS // 2


def test_5x_slowdown_is_detected_quickly_and_recovers_after() -> None:
    cfg = DetectorConfig()
    detector = StragglerDetector(WORKERS, cfg)
    log: list[tuple[int, int, StragglerEvent]] = []
    slow_from, slow_until = 20, 60

    def factor(w: int, r: int) -> float:
        return 5.0 if w == 3 and slow_from <= r < slow_until else 1.0

    _run(detector, range(100), factor, log)
    assert [(e.kind, e.worker) for _, _, e in log] == [("detected", 3), ("recovered", 3)]
    (detected_round, _, detected), (recovered_round, _, recovered) = log
    # Worker 3 steps once per round, so rounds since the change count its own steps.
    assert detected_round - slow_from + 1 <= cfg.window + cfg.patience
    assert recovered_round - slow_until + 1 <= cfg.window + cfg.patience
    assert detected.ratio == pytest.approx(5.0)
    assert detected.time_s == pytest.approx(detected_round * 0.1)
    assert detected.progress == pytest.approx(detected_round / 1000)
    assert detected.reason == (
        "worker 3 median step 100.0 ms = 5.00x the others' 20.0 ms (threshold 1.5x)"
    )
    assert recovered.ratio == pytest.approx(1.0)
    assert "below recovery threshold 1.2x" in recovered.reason
    assert detector.stragglers == frozenset()


def test_hysteresis_a_ratio_between_thresholds_flips_nothing() -> None:
    detector = StragglerDetector(WORKERS)
    log: list[tuple[int, int, StragglerEvent]] = []

    def factor(w: int, r: int) -> float:
        if w != 3:
            return 1.0
        if r < 50 or 70 <= r < 120:
            return 1.35  # between recover_threshold 1.2 and threshold 1.5
        return 5.0 if r < 70 else 1.0

    _run(detector, range(50), factor, log)
    assert log == []  # 1.35x from the start: never detected
    _run(detector, range(50, 70), factor, log)
    assert [e.kind for _, _, e in log] == ["detected"]
    _run(detector, range(70, 120), factor, log)
    assert [e.kind for _, _, e in log] == ["detected"]  # 1.35x again: stays flagged
    assert detector.stragglers == frozenset({3})
    _run(detector, range(120, 140), factor, log)
    assert [e.kind for _, _, e in log] == ["detected", "recovered"]


def test_no_false_detections_under_lognormal_jitter() -> None:
    emulation = EmulationConfig(step_time_ms=20, jitter_sigma=0.2)
    models = [StepTimeModel(emulation, w, seed=11) for w in range(WORKERS)]
    detector = StragglerDetector(WORKERS)
    steps_per_worker = 10_000
    events = []
    for step in range(steps_per_worker):
        for w, model in enumerate(models):
            events += detector.observe(w, model.next_step_s(), step * 0.02, step / 10_000)
    detections = [e for e in events if e.kind == "detected"]
    assert not detections, (
        f"{len(detections)} false detections over {steps_per_worker} steps x {WORKERS} workers, "
        f"first: {detections[0].reason}"
    )


def test_never_more_than_half_flagged_and_a_pending_worker_waits_for_a_slot() -> None:
    detector = StragglerDetector(WORKERS)
    log: list[tuple[int, int, StragglerEvent]] = []

    def factor(w: int, r: int) -> float:
        if w < 4 and r >= 20:
            return 5.0
        return 25.0 if w == 4 and r >= 60 else 1.0

    _run(detector, range(60), factor, log)
    assert detector.stragglers == frozenset({0, 1, 2, 3})
    # Worker 4 at 25x is then slow next to the 5x ones, which now look ordinary: without the
    # cap it would be flagged a round before they recover, making five.
    _run(detector, range(60, 100), factor, log)
    assert detector.stragglers == frozenset({4})
    kinds = [(e.kind, w) for _, w, e in log]
    assert kinds[-1] == ("detected", 4)
    assert sorted(kinds[4:-1]) == [("recovered", w) for w in range(4)]


def test_single_worker_is_never_a_straggler() -> None:
    detector = StragglerDetector(1)
    for step in range(50):
        assert detector.observe(0, 1.0 if step > 10 else 0.01, step, 0.0) == []


def test_bad_inputs() -> None:
    detector = StragglerDetector(2)
    with pytest.raises(ValueError, match=r"worker 2 out of range 0\.\.1"):
        detector.observe(2, 0.02, 0.0, 0.0)
    with pytest.raises(ValueError, match="must be >= 0"):
        detector.observe(0, -1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="min_steps"):
        DetectorConfig(window=3, min_steps=4)
    with pytest.raises(ValueError, match="recover_threshold"):
        DetectorConfig(threshold=1.5, recover_threshold=1.6)
    with pytest.raises(ValueError, match="threshold"):
        DetectorConfig(threshold=1.0)
