import pytest

from syncswitch.core.sync.protocol import ASP, BSP, ProtocolSpec, Schedule, ScheduleError
from syncswitch.core.sync.protocols import Ssp


def test_parse_pure_and_mixed_schedules() -> None:
    assert str(Schedule.parse("bsp")) == "bsp"
    mixed = Schedule.parse("bsp:0.1,asp:0.8,bsp")
    assert [p.spec.name for p in mixed.phases] == ["bsp", "asp", "bsp"]
    assert [p.end for p in mixed.phases] == [0.1, 0.8, 1.0]
    assert Schedule.parse("ssp-3").phases[0].spec == Ssp(3)


def test_spec_at_gives_each_phase_its_half_open_range() -> None:
    schedule = Schedule.parse("bsp:0.25,asp")
    assert schedule.spec_at(0.0) == BSP
    assert schedule.spec_at(0.2499) == BSP
    assert schedule.spec_at(0.25) == ASP
    assert schedule.spec_at(1.0) == ASP


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("xsp", "unknown protocol 'xsp'"),
        ("ssp", "unknown protocol"),
        ("ssp--1", "unknown protocol"),
        ("bsp:0.5,asp:0.3,bsp", "must increase"),
        ("bsp:1.5,asp", "strictly between 0 and 1"),
        ("bsp:0,asp", "strictly between 0 and 1"),
        ("bsp:-0.2,asp", "strictly between 0 and 1"),
        ("bsp,asp", "needs an end fraction"),
        ("bsp:0.5,asp:0.9", "must run to the end"),
        ("bsp:abc,asp", "not a number"),
        ("", "empty phase"),
        ("bsp:0.5,,asp", "empty phase"),
    ],
)
def test_bad_schedules_are_refused_with_a_reason(text: str, fragment: str) -> None:
    with pytest.raises(ScheduleError, match=fragment):
        Schedule.parse(text)


def test_bsp_waits_at_a_barrier_for_every_active_worker_and_the_async_ones_do_not() -> None:
    bsp, asp, ssp = (ProtocolSpec.parse(text) for text in ("bsp", "asp", "ssp-2"))
    assert bsp.barrier and not asp.barrier and not ssp.barrier
    assert bsp.round_complete({0, 1, 2}, {0, 1, 2}) and not bsp.round_complete({0, 1}, {0, 1, 2})
    assert (asp.clock_bound, ssp.clock_bound) == (None, 2)
    assert bsp.straggler_detour == ASP and asp.straggler_detour is None


def test_the_unknown_protocol_error_lists_every_registered_spelling() -> None:
    with pytest.raises(ScheduleError) as error:
        ProtocolSpec.parse("xsp")
    assert str(error.value) == (
        "unknown protocol 'xsp': allowed are 'bsp', 'asp', 'ssp-S' with S an integer >= 0 "
        "and 'local-H' with H an integer >= 1"
    )
