import itertools

import pytest

from syncswitch.core.stragglers.scenarios import (
    ScenarioError,
    StragglerEpisode,
    StragglerScenario,
    paper_scenario,
    parse_scenario,
    random_scenario,
)


def test_parse_fractions_seconds_delay_and_factor() -> None:
    scenario = parse_scenario(
        [
            {"workers": [3, 1], "start": 0.1, "duration": 0.2, "delay_ms": 30},
            {"workers": 2, "start_s": 5, "duration_s": 1.5, "factor": 2.0},
        ]
    )
    first, second = scenario.episodes
    assert first == StragglerEpisode((1, 3), start=0.1, duration=0.2, delay_ms=30)
    assert second == StragglerEpisode((2,), start_s=5, duration_s=1.5, factor=2.0)
    scenario.validate(4)


def test_describe_reads_back_unchanged() -> None:
    scenario = parse_scenario(
        [
            {"workers": [0], "start": 0.5, "duration": 0.1, "factor": 3},
            {"workers": [1, 2], "start_s": 0, "duration_s": 10, "delay_ms": 10},
        ]
    )
    assert scenario.describe() == [
        {"workers": [0], "start": 0.5, "duration": 0.1, "factor": 3},
        {"workers": [1, 2], "start_s": 0, "duration_s": 10, "delay_ms": 10},
    ]
    assert parse_scenario(scenario.describe()) == scenario


@pytest.mark.parametrize("data", [None, []])
def test_absent_or_empty_means_no_stragglers(data: object) -> None:
    scenario = parse_scenario(data)
    assert scenario.episodes == ()
    assert scenario.step_time_s(0, 0.02, 0.5, 1.0) == 0.02


GOOD = {"workers": [1], "start": 0.1, "duration": 0.2, "delay_ms": 10}


def _with(**changes: object) -> dict:
    spec = {**GOOD, **changes}
    return {key: value for key, value in spec.items() if value is not None}


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (_with(duration=-0.1), "stragglers[1]: 'duration' must be > 0"),
        (_with(duration=0), "stragglers[1]: 'duration' must be > 0"),
        (_with(duration=None, duration_s=0, start=None, start_s=1), "'duration_s' must be > 0"),
        (_with(start_s=2), "stragglers[1]: give either 'start' or 'start_s', not both"),
        (_with(start=None), "stragglers[1]: give one of 'start' (fraction"),
        (_with(factor=2), "stragglers[1]: give either 'delay_ms' or 'factor', not both"),
        (_with(delay_ms=None), "give one of 'delay_ms'"),
        (_with(dealy_ms=5), "unknown key 'dealy_ms' (did you mean 'delay_ms'?)"),
        (_with(start="10%"), "'start' must be a finite number, got str '10%'"),
        (_with(delay_ms=True), "'delay_ms' must be a finite number, got bool"),
        (_with(workers="all"), "'workers' must be a non-empty list"),
        (_with(workers=[1, 1]), "'workers' lists a worker twice"),
        (_with(workers=[-1]), "'workers' must hold integer ids >= 0"),
        (_with(workers=None), "stragglers[1]: 'workers' is required"),
        (_with(start=1.0), "'start' must be in [0, 1)"),
        (_with(factor=0.5, delay_ms=None), "'factor' must be > 1"),
        (_with(delay_ms=-5), "'delay_ms' must be > 0"),
        (_with(duration=None, duration_s=3), "'start' cannot go with 'duration_s'"),
    ],
)
def test_bad_episode_names_the_field(spec: dict, fragment: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario([GOOD, spec])
    message = str(caught.value)
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("worker 3 slow", "stragglers: expected a list of episodes, got str"),
        ([GOOD, 3], "stragglers[1]: expected a mapping"),
    ],
)
def test_bad_shape(data: object, fragment: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert fragment in str(caught.value)


def test_unknown_worker_names_it_and_the_allowed_range() -> None:
    scenario = parse_scenario([GOOD, {**GOOD, "workers": [2, 9]}])
    with pytest.raises(ScenarioError) as caught:
        scenario.validate(8)
    assert str(caught.value) == (
        "stragglers[1]: worker 9 does not exist; allowed ids are 0..7 for 8 workers"
    )


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ScenarioError, match="straggler episode: give one of 'start'"):
        StragglerEpisode((0,), duration=0.1, delay_ms=10)


def test_active_window_in_fractions_is_half_open_and_ignores_seconds() -> None:
    episode = StragglerEpisode((0,), start=0.25, duration=0.25, delay_ms=10)
    assert not episode.active(0.2499, 1e9)
    assert episode.active(0.25, 0.0)
    assert episode.active(0.4999, 0.0)
    assert not episode.active(0.5, 0.0)


def test_active_window_in_seconds_ignores_progress() -> None:
    episode = StragglerEpisode((0,), start_s=10, duration_s=5, factor=2)
    assert not episode.active(0.5, 9.99)
    assert episode.active(0.0, 10.0)
    assert episode.active(0.99, 14.99)
    assert not episode.active(0.5, 15.0)


def test_slow_step_adds_a_delay_or_multiplies() -> None:
    assert StragglerEpisode((0,), start=0, duration=1, delay_ms=30).slow_step_s(
        0.02
    ) == pytest.approx(0.05)
    assert StragglerEpisode((0,), start=0, duration=1, factor=5).slow_step_s(0.02) == pytest.approx(
        0.1
    )


def test_step_time_with_overlapping_episodes() -> None:
    scenario = StragglerScenario(
        (
            StragglerEpisode((1, 2), start=0.1, duration=0.2, delay_ms=10),
            StragglerEpisode((2,), start=0.2, duration=0.2, factor=2),
            StragglerEpisode((2,), start_s=10, duration_s=10, delay_ms=5),
            StragglerEpisode((2,), start=0.2, duration=0.1, factor=1.5),
        )
    )
    base = 0.02
    # Factors multiply the base, delays add on top.
    assert scenario.step_time_s(2, base, 0.25, 15) == pytest.approx(base * 2 * 1.5 + 0.015)
    assert scenario.step_time_s(1, base, 0.25, 15) == pytest.approx(base + 0.010)
    assert scenario.step_time_s(0, base, 0.25, 15) == base
    assert scenario.step_time_s(2, base, 0.35, 25) == pytest.approx(base * 2)
    assert scenario.step_time_s(2, base, 0.05, 25) == base
    assert scenario.straggling(0.25, 15) == frozenset({1, 2})
    assert scenario.straggling(0.5, 0) == frozenset()


@pytest.mark.parametrize("stragglers", [1, 2])
@pytest.mark.parametrize("occurrences", [1, 4])
@pytest.mark.parametrize("delay_ms", [10, 30])
def test_paper_scenario_shapes(stragglers: int, occurrences: int, delay_ms: float) -> None:
    bsp_end = 0.4
    scenario = paper_scenario(stragglers, delay_ms, occurrences, bsp_end, workers=8, seed=3)
    scenario.validate(8)
    episodes = scenario.episodes
    assert len(episodes) == occurrences
    slot = bsp_end / occurrences
    for index, episode in enumerate(episodes):
        assert len(episode.workers) == stragglers
        assert episode.delay_ms == delay_ms and episode.factor is None
        assert episode.duration == pytest.approx(slot / 2)
        assert episode.start == pytest.approx(slot * index + slot / 4)
        assert episode.start is not None and episode.duration is not None
        assert episode.start > 0 and episode.start + episode.duration < bsp_end
    assert paper_scenario(stragglers, delay_ms, occurrences, bsp_end, 8, seed=3) == scenario


def test_paper_scenario_rejects_impossible_shapes() -> None:
    with pytest.raises(ScenarioError, match="between 1 and 1 for 2 workers, got 2"):
        paper_scenario(2, 10, 1, 0.5, workers=2)
    with pytest.raises(ScenarioError, match="bsp_end"):
        paper_scenario(1, 10, 1, 0.0, workers=8)


def _ends(scenario: StragglerScenario) -> list[tuple[float, float]]:
    spans = []
    for episode in scenario.episodes:
        assert episode.start is not None and episode.duration is not None
        spans.append((episode.start, episode.start + episode.duration))
    return spans


def test_random_scenario_is_reproducible_and_non_overlapping() -> None:
    def draw(seed: int) -> StragglerScenario:
        return random_scenario(
            count=6,
            workers=8,
            stragglers_per_episode=2,
            duration=0.05,
            delay_ms=None,
            factor=3.0,
            window=(0.1, 0.6),
            seed=seed,
        )

    scenario = draw(7)
    assert scenario == draw(7)
    assert scenario != draw(8)
    scenario.validate(8)
    spans = _ends(scenario)
    assert len(spans) == 6
    for (_, end), (next_start, _) in itertools.pairwise(spans):
        assert end <= next_start + 1e-12
    assert all(start >= 0.1 and end <= 0.6 + 1e-12 for start, end in spans)
    assert all(len(e.workers) == 2 and e.factor == 3.0 for e in scenario.episodes)


def test_random_scenario_that_cannot_fit_says_so() -> None:
    with pytest.raises(ScenarioError, match="do not fit"):
        random_scenario(5, 8, 1, 0.2, 10, None, (0.0, 0.5), seed=0)
    with pytest.raises(ScenarioError, match="exactly one"):
        random_scenario(1, 8, 1, 0.1, 10, 2.0, (0.0, 0.5), seed=0)
