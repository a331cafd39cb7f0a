"""Declarative transient stragglers: which workers are slowed, when, for how long, by how much.

An episode slows some workers either by an added delay per step (like added network latency,
the Sync-Switch paper's stragglers) or by a step-time factor (a slower or shared device). It is
timed in fractions of the training samples, so it lands at the same point of training whatever
the throughput, or in seconds since the run began, for wall-clock events. An episode is timed
in one unit throughout: a start in fractions with a duration in seconds would need the time at
which that fraction was reached, and these objects stay stateless so every engine and the
simulator read them the same way.

Nothing here knows about an engine: a worker asks `step_time_s` what its step costs now.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeGuard

from syncswitch.keys import unknown_key_problem

_PAIRS = (
    ("start", "start_s", "fraction of training samples", "seconds since the run began"),
    ("duration", "duration_s", "fraction of training samples", "seconds"),
    ("delay_ms", "factor", "milliseconds added per step", "step-time multiplier"),
)
_NUMBERS = ("start", "start_s", "duration", "duration_s", "delay_ms", "factor")
KEYS = ("workers", *_NUMBERS)


# Upper bounds: a scenario is a handful of episodes; past these a value is a typo or a hostile
# file, and would cost unbounded memory (episodes) or stall a run (delays).
MAX_EPISODES = 10_000
MAX_DELAY_MS = 60_000.0
MAX_FACTOR = 1000.0
MAX_SECONDS = 7 * 24 * 3600.0


class ScenarioError(ValueError):
    """A straggler episode or scenario that cannot describe a run."""


def _is_number(value: object) -> TypeGuard[int | float]:
    # bool is an int subclass, but `start: true` in a config is a mistake, not a 1.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _episode_problem(values: Mapping[str, object]) -> str | None:
    """What is wrong with one episode's values (None: nothing), for any caller to prefix."""
    workers = values.get("workers")
    if not isinstance(workers, tuple) or not workers:
        return f"'workers' must be a non-empty list of worker ids, got {workers!r}"
    for worker in workers:
        if isinstance(worker, bool) or not isinstance(worker, int) or worker < 0:
            return f"'workers' must hold integer ids >= 0, got {worker!r}"
    if len(set(workers)) != len(workers):
        return f"'workers' lists a worker twice: {list(workers)}"
    for name in _NUMBERS:
        value = values.get(name)
        if value is not None and not (_is_number(value) and math.isfinite(value)):
            return f"'{name}' must be a finite number, got {type(value).__name__} {value!r}"
    for first, second, first_means, second_means in _PAIRS:
        given = [name for name in (first, second) if values.get(name) is not None]
        if len(given) == 2:
            return f"give either '{first}' or '{second}', not both"
        if not given:
            return f"give one of '{first}' ({first_means}) or '{second}' ({second_means})"
    timed_in_seconds = values.get("start_s") is not None
    if timed_in_seconds != (values.get("duration_s") is not None):
        start, duration = ("start_s", "duration") if timed_in_seconds else ("start", "duration_s")
        return (
            f"'{start}' cannot go with '{duration}': time an episode in fractions ('start', "
            "'duration') or in seconds ('start_s', 'duration_s')"
        )
    checks: tuple[tuple[str, Callable[[float], bool], str], ...] = (
        ("start", lambda v: 0 <= v < 1, "in [0, 1)"),
        ("start_s", lambda v: 0 <= v <= MAX_SECONDS, f"in [0, {MAX_SECONDS:g}]"),
        ("duration", lambda v: 0 < v <= 1, "> 0 and <= 1"),
        ("duration_s", lambda v: 0 < v <= MAX_SECONDS, f"> 0 and <= {MAX_SECONDS:g}"),
        ("delay_ms", lambda v: 0 < v <= MAX_DELAY_MS, f"> 0 and <= {MAX_DELAY_MS:g}"),
        (
            "factor",
            lambda v: 1 < v <= MAX_FACTOR,
            f"> 1 and <= {MAX_FACTOR:g} (a multiplier of the step time)",
        ),
    )
    for name, ok, allowed in checks:
        value = values.get(name)
        # Every value given is a finite number by now (checked above).
        if _is_number(value) and not ok(value):
            return f"'{name}' must be {allowed}, got {value!r}"
    return None


@dataclass(frozen=True)
class StragglerEpisode:
    workers: tuple[int, ...]
    start: float | None = None  # fraction of training samples in [0, 1)
    start_s: float | None = None  # or seconds since the run began
    duration: float | None = None  # fraction (> 0), or
    duration_s: float | None = None  # seconds (> 0)
    delay_ms: float | None = None  # added per step (like added network latency), > 0, or
    factor: float | None = None  # step-time multiplier, > 1

    def __post_init__(self) -> None:
        problem = _episode_problem({f.name: getattr(self, f.name) for f in fields(self)})
        if problem:
            raise ScenarioError(f"straggler episode: {problem}")
        # Sorted, so two episodes naming the same workers compare equal.
        object.__setattr__(self, "workers", tuple(sorted(self.workers)))

    def active(self, progress: float, elapsed_s: float) -> bool:
        """Whether the episode is on now; its window is half-open, [start, start + duration)."""
        if self.start is not None and self.duration is not None:
            return self.start <= progress < self.start + self.duration
        assert self.start_s is not None and self.duration_s is not None
        return self.start_s <= elapsed_s < self.start_s + self.duration_s

    def slow_step_s(self, base_step_s: float) -> float:
        if self.delay_ms is not None:
            return base_step_s + self.delay_ms / 1000.0
        assert self.factor is not None
        return base_step_s * self.factor

    def describe(self) -> dict[str, Any]:
        """The given fields only, in config form, so `parse_scenario` reads it back unchanged."""
        record: dict[str, Any] = {"workers": list(self.workers)}
        for name in _NUMBERS:
            value = getattr(self, name)
            if value is not None:
                record[name] = value
        return record


@dataclass(frozen=True)
class StragglerScenario:
    episodes: tuple[StragglerEpisode, ...] = ()

    def validate(self, workers: int) -> None:
        """Checks the scenario against a run of `workers` workers."""
        if workers < 1:
            raise ScenarioError(f"stragglers: a run needs at least 1 worker, got {workers}")
        for index, episode in enumerate(self.episodes):
            for worker in episode.workers:
                if worker >= workers:
                    raise ScenarioError(
                        f"stragglers[{index}]: worker {worker} does not exist; allowed ids are "
                        f"0..{workers - 1} for {workers} workers"
                    )

    def step_time_s(
        self, worker: int, base_step_s: float, progress: float, elapsed_s: float
    ) -> float:
        """`worker`'s step time now, with every episode active for it applied.

        Factors multiply the base step and delays are added after, so an added latency is not
        itself scaled by a slower device. Overlapping delays add, overlapping factors multiply.
        """
        factor = 1.0
        delay_s = 0.0
        for episode in self._active_for(worker, progress, elapsed_s):
            if episode.factor is not None:
                factor *= episode.factor
            else:
                assert episode.delay_ms is not None
                delay_s += episode.delay_ms / 1000.0
        return base_step_s * factor + delay_s

    def straggling(self, progress: float, elapsed_s: float) -> frozenset[int]:
        """The workers slowed now: the ground truth a detector can be scored against."""
        return frozenset(
            worker
            for episode in self.episodes
            if episode.active(progress, elapsed_s)
            for worker in episode.workers
        )

    def describe(self) -> list[dict[str, Any]]:
        return [episode.describe() for episode in self.episodes]

    def _active_for(self, worker: int, progress: float, elapsed_s: float) -> list[StragglerEpisode]:
        return [
            episode
            for episode in self.episodes
            if worker in episode.workers and episode.active(progress, elapsed_s)
        ]


def _parse_workers(value: object) -> object:
    # A single id is accepted for the common one-straggler case; anything else is left for
    # the episode check to reject with its own message.
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(value)
    return value


def parse_scenario(data: object) -> StragglerScenario:
    """Reads the `stragglers:` value of a config: a list of mappings with the episode keys.

    An absent or empty value means no stragglers. Every problem is one ScenarioError whose
    message starts with where it is, e.g. "stragglers[1]: give either 'start' or 'start_s',
    not both".
    """
    if data is None:
        return StragglerScenario()
    if not isinstance(data, list | tuple):
        raise ScenarioError(
            f"stragglers: expected a list of episodes, got {type(data).__name__} {data!r}"
        )
    episodes = []
    for index, item in enumerate(data):
        where = f"stragglers[{index}]"
        if not isinstance(item, Mapping):
            raise ScenarioError(
                f"{where}: expected a mapping with keys {', '.join(KEYS)}, "
                f"got {type(item).__name__} {item!r}"
            )
        problem = unknown_key_problem(item, KEYS)
        if problem:
            raise ScenarioError(f"{where}: {problem}")
        if "workers" not in item:
            raise ScenarioError(f"{where}: 'workers' is required (a worker id or a list of ids)")
        values: dict[str, Any] = {key: item.get(key) for key in KEYS}
        values["workers"] = _parse_workers(values["workers"])
        problem = _episode_problem(values)
        if problem:
            raise ScenarioError(f"{where}: {problem}")
        episodes.append(StragglerEpisode(**values))
    return StragglerScenario(tuple(episodes))


def _check_stragglers(what: str, stragglers: int, workers: int) -> None:
    if workers < 2:
        raise ScenarioError(f"{what}: stragglers need at least 2 workers, got {workers}")
    # At least one worker must stay at full speed, or there is no one to straggle behind.
    if not 1 <= stragglers < workers:
        raise ScenarioError(
            f"{what}: stragglers per episode must be between 1 and {workers - 1} "
            f"for {workers} workers, got {stragglers}"
        )


def _check_slowdown(what: str, delay_ms: float | None, factor: float | None) -> None:
    if (delay_ms is None) == (factor is None):
        raise ScenarioError(f"{what}: give either delay_ms or factor, exactly one")


def random_scenario(
    count: int,
    workers: int,
    stragglers_per_episode: int,
    duration: float,
    delay_ms: float | None,
    factor: float | None,
    window: tuple[float, float],
    seed: int,
) -> StragglerScenario:
    """`count` episodes of `duration` (fraction), each wholly inside `window`, none overlapping.

    The same seed gives the same scenario. Starts are drawn as `count` uniform points in the
    window less the total episode length, sorted, each then pushed right by the episodes
    before it: every non-overlapping placement is equally likely.
    """
    what = "random stragglers"
    low, high = window
    if not 0 <= low < high <= 1:
        raise ScenarioError(f"{what}: window {window} must satisfy 0 <= low < high <= 1")
    if not 0 <= count <= MAX_EPISODES:
        raise ScenarioError(f"{what}: count must be in 0..{MAX_EPISODES}, got {count}")
    if not 0 < duration <= 1:
        raise ScenarioError(f"{what}: duration must be > 0 and <= 1, got {duration}")
    _check_stragglers(what, stragglers_per_episode, workers)
    _check_slowdown(what, delay_ms, factor)
    slack = (high - low) - count * duration
    if slack < 0:
        raise ScenarioError(
            f"{what}: {count} episodes of {duration} do not fit in window {window} without "
            "overlapping"
        )
    rng = random.Random(seed)
    offsets = sorted(rng.uniform(0, slack) for _ in range(count))
    episodes = []
    for index, offset in enumerate(offsets):
        chosen = tuple(rng.sample(range(workers), stragglers_per_episode))
        start = low + offset + index * duration
        episodes.append(
            StragglerEpisode(
                chosen, start=start, duration=duration, delay_ms=delay_ms, factor=factor
            )
        )
    return StragglerScenario(tuple(episodes))


def paper_scenario(
    stragglers: int,
    delay_ms: float,
    occurrences: int,
    bsp_end: float,
    workers: int,
    seed: int = 0,
    *,
    coverage: float = 0.5,
) -> StragglerScenario:
    """The Sync-Switch paper's transient stragglers, placed inside the BSP phase [0, bsp_end).

    The paper's family is 1 or 2 stragglers with 10 or 30 ms added delay, occurring once or 4
    times; other values are accepted for sweeps. The phase is cut into `occurrences` equal
    slots and each episode covers the middle `coverage` of its slot, so every episode starts
    after some clean training and ends before the switch. Each occurrence slows its own
    seeded random choice of workers.
    """
    what = "paper stragglers"
    _check_stragglers(what, stragglers, workers)
    if not 0 < delay_ms <= MAX_DELAY_MS:
        raise ScenarioError(f"{what}: delay_ms must be > 0 and <= {MAX_DELAY_MS:g}, got {delay_ms}")
    if not 1 <= occurrences <= MAX_EPISODES:
        raise ScenarioError(f"{what}: occurrences must be in 1..{MAX_EPISODES}, got {occurrences}")
    if not 0 < bsp_end <= 1:
        raise ScenarioError(f"{what}: bsp_end must be > 0 and <= 1, got {bsp_end}")
    if not 0 < coverage <= 1:
        raise ScenarioError(f"{what}: coverage must be > 0 and <= 1, got {coverage}")
    rng = random.Random(seed)
    slot = bsp_end / occurrences
    episodes = tuple(
        StragglerEpisode(
            tuple(rng.sample(range(workers), stragglers)),
            start=slot * (index + (1 - coverage) / 2),
            duration=slot * coverage,
            delay_ms=delay_ms,
        )
        for index in range(occurrences)
    )
    return StragglerScenario(episodes)


# Generator items in a `stragglers:` list: the arguments each takes, with their defaults.
_REQUIRED = object()
_GENERATOR_ARGS: dict[str, dict[str, object]] = {
    "random": {
        "count": _REQUIRED,
        "stragglers": 1,
        "duration": _REQUIRED,
        "delay_ms": None,  # exactly one of delay_ms and factor
        "factor": None,
        "window": (0.0, 1.0),
        "seed": 0,
    },
    "paper": {
        "stragglers": _REQUIRED,
        "delay_ms": _REQUIRED,
        "occurrences": _REQUIRED,
        "seed": 0,
        "coverage": 0.5,
    },
}


def build_scenario(data: object, *, workers: int, bsp_end: float | None) -> StragglerScenario:
    """Reads a config's `stragglers:` value: episodes and generator items, checked for `workers`.

    Besides episodes, an item may be `{random: {count, stragglers, duration, delay_ms|factor,
    window, seed}}` (non-overlapping episodes drawn at random) or `{paper: {stragglers,
    delay_ms, occurrences, seed, coverage}}` (the Sync-Switch paper's family, placed inside
    the first BSP phase, which ends at `bsp_end`).
    """
    if not isinstance(data, list | tuple):
        return _checked(parse_scenario(data), workers)
    episodes: list[StragglerEpisode] = []
    plain: list[object] = []
    for index, item in enumerate(data):
        kind = _generator_kind(item)
        if kind is None:
            plain.append(item)
            continue
        assert isinstance(item, Mapping)
        where = f"stragglers[{index}].{kind}"
        episodes.extend(_generate(where, kind, item[kind], workers, bsp_end))
        if len(episodes) > MAX_EPISODES:
            raise ScenarioError(f"stragglers: more than {MAX_EPISODES} episodes in all")
    episodes.extend(parse_scenario(plain).episodes)
    if len(episodes) > MAX_EPISODES:
        raise ScenarioError(f"stragglers: {len(episodes)} episodes; at most {MAX_EPISODES}")
    return _checked(StragglerScenario(tuple(episodes)), workers)


def _checked(scenario: StragglerScenario, workers: int) -> StragglerScenario:
    scenario.validate(workers)
    return scenario


def _generator_kind(item: object) -> str | None:
    if isinstance(item, Mapping) and len(item) == 1:
        (key,) = item
        if key in _GENERATOR_ARGS:
            return str(key)
    return None


def _generate(
    where: str, kind: str, args: object, workers: int, bsp_end: float | None
) -> tuple[StragglerEpisode, ...]:
    allowed = _GENERATOR_ARGS[kind]
    if not isinstance(args, Mapping):
        raise ScenarioError(f"{where}: expected a mapping of {', '.join(allowed)}, got {args!r}")
    problem = unknown_key_problem(args, list(allowed))
    if problem:
        raise ScenarioError(f"{where}: {problem}")
    values = {**allowed, **args}
    missing = [name for name, value in values.items() if value is _REQUIRED]
    if missing:
        raise ScenarioError(f"{where}: missing {', '.join(missing)}")
    for name, value in values.items():
        if name == "window" or value is None:
            continue
        if not (_is_number(value) and math.isfinite(value)):
            raise ScenarioError(f"{where}: '{name}' must be a finite number, got {value!r}")
    if kind == "random":
        window = values.pop("window")
        if not (isinstance(window, list | tuple) and len(window) == 2):
            raise ScenarioError(f"{where}: window must be [low, high], got {window!r}")
        return random_scenario(
            count=int(values["count"]),
            workers=workers,
            stragglers_per_episode=int(values["stragglers"]),
            duration=float(values["duration"]),
            delay_ms=values["delay_ms"],
            factor=values["factor"],
            window=(float(window[0]), float(window[1])),
            seed=int(values["seed"]),
        ).episodes
    if bsp_end is None:
        raise ScenarioError(
            f"{where}: the paper's stragglers are placed in the BSP phase, and the schedule "
            "has none"
        )
    return paper_scenario(
        stragglers=int(values["stragglers"]),
        delay_ms=float(values["delay_ms"]),
        occurrences=int(values["occurrences"]),
        bsp_end=bsp_end,
        workers=workers,
        seed=int(values["seed"]),
        coverage=float(values["coverage"]),
    ).episodes
