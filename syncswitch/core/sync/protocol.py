"""Schedules of synchronization protocols over training progress, and their grammar.

A schedule is `PROTOCOL[:END],...` ("bsp:0.25,asp"): each phase's protocol (a class of
core/sync/protocols/, named as the grammar writes it: bsp, asp, ssp-S, local-H, or any
registered one) runs until its end, a fraction of the total training workload (samples), never
a step count, because one BSP update and one ASP update consume different amounts of data.

One BSP phase may end "online" (`bsp:online,asp`, or `online` alone for that): the run decides
when, from signals it measures (control/timing.py). Its `end` is then the latest it may end
(the share's ceiling, `with_online_ceiling`), which the shards enforce themselves; the run
controller ends it earlier, on every shard alike, when its rule says so."""

from __future__ import annotations

from dataclasses import dataclass

from syncswitch.core.sync.protocols import (
    ASP,
    BSP,
    MAX_LOCAL_STEPS,
    ProtocolSpec,
    ScheduleError,
    parse_protocol,
)

# The protocols themselves live in core/sync/protocols/, one class a module; the grammar and
# the code that reads schedules import them from here.
__all__ = [
    "ASP",
    "BSP",
    "DEFAULT_ONLINE_CEILING",
    "MAX_LOCAL_STEPS",
    "ONLINE",
    "Phase",
    "ProtocolSpec",
    "Schedule",
    "ScheduleError",
    "parse_protocol",
]


ONLINE = "online"  # a phase end decided at run time; alone, the schedule bsp:online,asp
DEFAULT_ONLINE_CEILING = 7 / 8  # the latest an online phase ends unless configured


@dataclass(frozen=True)
class Phase:
    """A protocol that runs until `end` (fraction of total samples); the last phase ends at 1.

    `online`: the run decides when the phase ends; `end` is the latest it may."""

    spec: ProtocolSpec
    end: float
    online: bool = False


@dataclass(frozen=True)
class Schedule:
    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        if not self.phases:
            raise ScheduleError("a schedule needs at least one phase")
        previous = 0.0
        for index, phase in enumerate(self.phases):
            last = index == len(self.phases) - 1
            if last and phase.end != 1.0:
                raise ScheduleError("the last phase must run to the end of training")
            if not last and not 0.0 < phase.end < 1.0:
                raise ScheduleError(
                    f"phase {index + 1} ({phase.spec.name}) ends at {phase.end}: "
                    "a phase end must be a fraction strictly between 0 and 1"
                )
            if phase.end <= previous:
                raise ScheduleError(f"phase ends must increase: {phase.end} comes after {previous}")
            previous = phase.end
        self._validate_online()

    def _validate_online(self) -> None:
        online = [i for i, phase in enumerate(self.phases) if phase.online]
        if len(online) > 1:
            raise ScheduleError("only one phase may end 'online' (the run decides one switch)")
        for index in online:
            phase = self.phases[index]
            if phase.spec != BSP:
                raise ScheduleError(
                    f"only a bsp phase may end 'online' (the run decides when to leave BSP), "
                    f"not {phase.spec.name}"
                )
            following = self.phases[index + 1].spec
            if not following.is_async:
                raise ScheduleError(
                    f"the phase after 'bsp:online' must be asp or ssp-S, not {following.name}"
                )

    @property
    def online_index(self) -> int | None:
        """The index of the phase whose end the run decides, or None."""
        return next((i for i, phase in enumerate(self.phases) if phase.online), None)

    def online_window(self) -> tuple[float, float]:
        """(start, latest end) of the online phase; a schedule without one has none."""
        index = self.online_index
        if index is None:
            raise ValueError(f"schedule {self} has no online phase")
        start = self.phases[index - 1].end if index else 0.0
        return start, self.phases[index].end

    def with_online_ceiling(self, ceiling: float) -> Schedule:
        """The online phase ends by `ceiling` at the latest (or by the next phase's end)."""
        index = self.online_index
        if index is None:
            return self
        phases = list(self.phases)
        start, limit = (phases[index - 1].end if index else 0.0), phases[index + 1].end
        if not start < ceiling < limit:
            raise ScheduleError(
                f"the online phase must end between its start {start:g} and the next phase's "
                f"end {limit:g}, but its ceiling is {ceiling:g}: set --switch-ceiling in between"
            )
        end = ceiling
        phases[index] = Phase(phases[index].spec, end, online=True)
        return Schedule(tuple(phases))

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Parse `PROTOCOL[:END],...`, e.g. 'bsp:0.25,asp' or 'bsp:0.1,asp:0.8,bsp'; an END of
        'online' is decided at run time ('bsp:online,asp'; 'online' alone says that)."""
        if text.strip().lower() == ONLINE:
            text = f"bsp:{ONLINE},asp"
        parts = [part.strip() for part in text.split(",")]
        if not text.strip() or any(not part for part in parts):
            raise ScheduleError(f"empty phase in schedule {text!r}; expected e.g. 'bsp:0.25,asp'")
        if any(part.partition(":")[0].strip().lower() == ONLINE for part in parts):
            raise ScheduleError(
                f"'online' in {text!r} is a phase end, not a protocol: write 'bsp:online,asp' "
                "(or 'online' alone for that)"
            )
        ends = [part.partition(":")[2].strip().lower() for part in parts]
        if ends.count(ONLINE) > 1:
            raise ScheduleError("only one phase may end 'online' (the run decides one switch)")
        if ends[-1] == ONLINE:
            raise ScheduleError(
                f"the last phase {parts[-1]!r} runs to the end; 'online' ends a phase that has "
                "another after it (e.g. 'bsp:online,asp')"
            )
        phases = []
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            name, sep, end_text = part.partition(":")
            spec = parse_protocol(name)
            if last:
                if sep:
                    end = _parse_fraction(end_text, part)
                    if end != 1.0:
                        raise ScheduleError(
                            f"the last phase {part!r} must run to the end; drop ':{end_text}'"
                        )
                phases.append(Phase(spec, 1.0))
            else:
                if not sep:
                    raise ScheduleError(
                        f"phase {part!r} needs an end fraction (e.g. '{name}:0.25'); "
                        "only the last phase may omit it"
                    )
                phases.append(_middle_phase(spec, end_text, part, parts[index + 1 :]))
        return cls(tuple(phases))

    @classmethod
    def single(cls, spec: ProtocolSpec) -> Schedule:
        return cls((Phase(spec, 1.0),))

    def spec_at(self, progress: float) -> ProtocolSpec:
        """The protocol in force at a progress fraction (a phase owns [start, end))."""
        for phase in self.phases:
            if progress < phase.end:
                return phase.spec
        return self.phases[-1].spec

    def phase_index_at(self, progress: float) -> int:
        for index, phase in enumerate(self.phases):
            if progress < phase.end:
                return index
        return len(self.phases) - 1

    def __str__(self) -> str:
        ends = [ONLINE if p.online else format(p.end, "g") for p in self.phases[:-1]]
        parts = [f"{p.spec.name}:{end}" for p, end in zip(self.phases, ends, strict=False)]
        return ",".join([*parts, self.phases[-1].spec.name])


def _middle_phase(spec: ProtocolSpec, end_text: str, part: str, rest: list[str]) -> Phase:
    """A phase that is not the last: its end is a fraction, or 'online' (then its latest end
    is the default ceiling, or the next fixed end if that comes first, until the run's
    configured ceiling replaces it)."""
    if end_text.strip().lower() != ONLINE:
        return Phase(spec, _parse_fraction(end_text, part))
    latest = DEFAULT_ONLINE_CEILING
    if len(rest) > 1:  # the phase after the online one has an end of its own
        try:
            next_end = float(rest[0].partition(":")[2])
        except ValueError:
            next_end = 1.0  # the next phase's own parse says what is wrong with it
        if next_end > 0:
            latest = min(latest, next_end - 1e-9)
    return Phase(spec, latest, online=True)


def _parse_fraction(text: str, part: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ScheduleError(
            f"phase end {text!r} in {part!r} is not a number; use a fraction in (0, 1)"
        ) from None
    return value
