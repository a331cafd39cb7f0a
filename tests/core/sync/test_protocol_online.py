"""`--schedule online` and `bsp:online,...`: parsing, the ceiling, and one-line errors."""

from __future__ import annotations

import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.core.sync.protocol import ASP, BSP, Schedule, ScheduleError
from syncswitch.errors import ConfigError


def test_online_alone_is_bsp_then_asp_when_the_run_decides() -> None:
    schedule = Schedule.parse("online")
    assert schedule == Schedule.parse("bsp:online,asp")
    first, second = schedule.phases
    assert (first.spec, first.online, first.end) == (BSP, True, 7 / 8)
    assert (second.spec, second.online, second.end) == (ASP, False, 1.0)
    assert schedule.online_index == 0 and str(schedule) == "bsp:online,asp"


def test_an_online_end_inside_a_longer_schedule() -> None:
    schedule = Schedule.parse("bsp:online,asp:0.9,bsp")
    assert schedule.online_index == 0 and schedule.online_window() == (0.0, 7 / 8)
    later = Schedule.parse("bsp:0.1,asp:0.2,bsp:online,ssp-2")
    assert later.online_index == 2 and later.online_window() == (0.2, 7 / 8)
    assert str(later) == "bsp:0.1,asp:0.2,bsp:online,ssp-2"
    assert Schedule.parse("bsp:0.25,asp").online_index is None


def test_the_configured_ceiling_is_the_latest_end() -> None:
    config = TrainConfig(schedule="bsp:online,asp:0.9,bsp", switch_ceiling=0.6)
    assert config.parsed_schedule().phases[0].end == 0.6
    assert config.parsed_schedule().phases[0].online


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("bsp:online,asp:0.5,bsp:online,asp", "only one phase may end 'online'"),
        ("bsp:online,asp:online", "only one phase may end 'online'"),
        ("asp:online,bsp", "only a bsp phase may end 'online'"),
        ("bsp:online,bsp", "must be asp or ssp-S"),
        ("bsp:online", "the last phase"),
    ],
)
def test_bad_online_schedules_are_refused(schedule: str, expected: str) -> None:
    with pytest.raises(ScheduleError, match=expected):
        Schedule.parse(schedule)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"schedule": "online", "switch_floor": 0.9}, "above switch_ceiling"),
        ({"schedule": "online", "switch_rule": "guess"}, "switch_rule 'guess' is not allowed"),
        ({"schedule": "online", "switch_ceiling": 1.0}, "switch_ceiling"),
        ({"schedule": "online", "switch_threshold": 0.0}, "switch_threshold"),
        ({"schedule": "bsp:online,asp:0.5,bsp"}, "ceiling is 0.875"),
        ({"schedule": "online,online"}, "is a phase end, not a protocol"),
    ],
)
def test_bad_online_options_are_one_line_config_errors(options: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as error:
        TrainConfig(**options)
    assert "\n" not in str(error.value)


def test_the_cli_answers_bad_online_options_in_one_line(capsys) -> None:
    argv = ["train", "--schedule", "online", "--switch-floor", "0.9", "--switch-ceiling", "0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "switch_floor" in err


def test_help_explains_the_online_schedule(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "'online'" in out and "--switch-rule" in out and "--switch-ceiling" in out
