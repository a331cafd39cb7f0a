import pytest

from syncswitch.core.sync.protocol import Protocol, ProtocolSpec, Schedule, ScheduleError


def test_parse_pure_and_mixed_schedules() -> None:
    assert str(Schedule.parse("bsp")) == "bsp"
    mixed = Schedule.parse("bsp:0.1,asp:0.8,bsp")
    assert [p.spec.name for p in mixed.phases] == ["bsp", "asp", "bsp"]
    assert [p.end for p in mixed.phases] == [0.1, 0.8, 1.0]
    assert Schedule.parse("ssp-3").phases[0].spec == ProtocolSpec(Protocol.SSP, 3)


def test_spec_at_gives_each_phase_its_half_open_range() -> None:
    schedule = Schedule.parse("bsp:0.25,asp")
    assert schedule.spec_at(0.0).protocol is Protocol.BSP
    assert schedule.spec_at(0.2499).protocol is Protocol.BSP
    assert schedule.spec_at(0.25).protocol is Protocol.ASP
    assert schedule.spec_at(1.0).protocol is Protocol.ASP


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


def test_bsp_aggregates_all_active_workers_and_async_one() -> None:
    assert ProtocolSpec.parse("bsp").gradients_per_update(8) == 8
    assert ProtocolSpec.parse("asp").gradients_per_update(8) == 1
    assert ProtocolSpec.parse("ssp-2").gradients_per_update(8) == 1
