"""What follows BSP under `--schedule online`: the BSP rounds' measured cost, and the choice."""

import math

import pytest

from syncswitch.core.sync.records import UpdateRecord
from syncswitch.core.timing.follower import (
    MAX_FIRST_STEPS,
    MIN_ROUNDS,
    FollowerChoice,
    MessageCostMeter,
    choose_follower,
)


def record(version: int, time_s: float, step_s: float, protocol: str = "bsp") -> UpdateRecord:
    return UpdateRecord(
        version=version,
        worker=0,
        sequence=version,
        computed_version=version - 1,
        staleness=0,
        protocol=protocol,
        samples=version * 32,
        progress=0.0,
        time_s=time_s,
        loss=1.0,
        step_time_s=step_s,
        lr=0.1,
        momentum=0.9,
    )


def bsp_rounds(count: int, message_s: float, steps: tuple[float, ...]) -> list[UpdateRecord]:
    """`count` BSP rounds of one gradient per step time, each taking its longest step plus
    `message_s`."""
    records, now = [], 0.0
    for version in range(1, count + 1):
        now += max(steps) + message_s
        records += [record(version, now, s) for s in steps]
    return records


def test_a_round_costs_its_longest_step_plus_its_messages() -> None:
    meter = MessageCostMeter()
    meter.add(bsp_rounds(MIN_ROUNDS + 1, message_s=0.05, steps=(0.02, 0.018, 0.03)))
    assert meter.enough
    message_s, step_s = meter.cost()
    # The first round has no start to time it from; a straggler's longer step is not the
    # network's: the longest step comes off, the median step is the compute.
    assert len(meter.rounds) == MIN_ROUNDS
    assert message_s == pytest.approx(0.05)
    assert step_s == pytest.approx(0.02)


def test_a_fast_network_keeps_asp_and_a_slow_one_chooses_local_h() -> None:
    fast = MessageCostMeter()
    fast.add(bsp_rounds(20, message_s=0.001, steps=(0.02, 0.02)))
    assert choose_follower(fast).protocol == "asp"
    slow = MessageCostMeter()
    slow.add(bsp_rounds(20, message_s=0.051, steps=(0.02, 0.02)))
    choice = choose_follower(slow)
    # H: the smallest that computes at least as long as it communicates, ceil(2.55).
    assert choice.protocol == "local-3" and choice.is_local
    assert choice.ratio == pytest.approx(2.55)
    assert "2.55x a step's compute" in choice.describe()


@pytest.mark.parametrize(
    ("message_s", "protocol"),
    [(0.03, "asp"), (0.0395, "asp"), (0.0405, "local-3"), (0.059, "local-3"), (10.0, "local-16")],
)
def test_local_from_two_steps_a_message_and_h_capped(message_s: float, protocol: str) -> None:
    """20 ms steps: a message under 2 steps keeps ASP, just over 2 gives local-3, and H is at
    most MAX_FIRST_STEPS however slow the network."""
    meter = MessageCostMeter()
    meter.add(bsp_rounds(20, message_s=message_s, steps=(0.02,)))
    assert choose_follower(meter).protocol == protocol
    assert MAX_FIRST_STEPS == 16


def test_too_few_rounds_choose_asp_and_say_so() -> None:
    meter = MessageCostMeter()
    meter.add(bsp_rounds(MIN_ROUNDS - 1, message_s=1.0, steps=(0.02,)))
    choice = choose_follower(meter)
    assert choice.protocol == "asp" and choice.ratio is None
    assert "too few BSP rounds" in choice.describe()


def test_an_asp_update_between_bsp_rounds_is_not_timed_as_one() -> None:
    meter = MessageCostMeter()
    meter.add([record(1, 1.0, 0.02), record(2, 1.5, 0.02, protocol="asp")])
    meter.add([record(3, 9.0, 0.02), record(4, 9.1, 0.02)])
    # Only 3 -> 4 is a BSP round: 0.1 s less its 0.02 s step.
    assert [m for m, _ in meter.rounds] == [pytest.approx(0.08)]


def test_the_meter_and_the_choice_survive_a_checkpoint() -> None:
    meter = MessageCostMeter()
    meter.add(bsp_rounds(12, message_s=0.05, steps=(0.02,)))
    again = MessageCostMeter.from_plain(meter.to_plain())
    assert list(again.rounds) == list(meter.rounds) and again.last == meter.last
    choice = choose_follower(meter)
    plain = choice.to_plain()
    assert plain["local_steps"] == 3 and math.isclose(plain["ratio"], 2.5)
    assert FollowerChoice.from_plain(plain) == choice
