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
    # H on the grid: 4 for a message of 1.5 to 8 steps.
    assert choice.protocol == "local-4" and choice.is_local
    assert choice.ratio == pytest.approx(2.55)
    assert "2.55x a step's compute" in choice.describe() and "at least 2.55x" in choice.describe()


@pytest.mark.parametrize(
    ("message_s", "protocol"),
    [
        (0.02, "asp"),
        (0.0295, "asp"),
        (0.0305, "local-4"),
        (0.059, "local-4"),
        (0.159, "local-4"),
        (0.161, "local-16"),
        (10.0, "local-16"),
    ],
)
def test_local_from_one_and_a_half_steps_a_message_and_h_on_a_grid(
    message_s: float, protocol: str
) -> None:
    """20 ms steps: a message under 1.5 steps keeps ASP, from 1.5 to 8 steps H is 4, and 16
    beyond, however slow the network."""
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
    assert plain["local_steps"] == 4 and math.isclose(plain["ratio"], 2.5)
    assert FollowerChoice.from_plain(plain) == choice


def test_a_load_that_moves_the_ratio_from_2_to_5_does_not_move_h() -> None:
    # Issue 47: on a 2-core machine the ratio moved 2.1-4.9 with load, and H with it (3-5).
    for message_s in (0.042, 0.06, 0.08, 0.098):
        meter = MessageCostMeter()
        meter.add(bsp_rounds(40, message_s=message_s, steps=(0.02,)))
        assert choose_follower(meter).protocol == "local-4"


def test_a_ratio_over_the_threshold_only_by_noise_keeps_asp() -> None:
    # Half the rounds at 1 step, half at 2.2: the median is over 1.5, its lower bound not.
    meter = MessageCostMeter()
    for index in range(40):
        meter.add(bsp_rounds(2, message_s=0.02 if index % 2 else 0.044, steps=(0.02,)))
        meter.last = None
    choice = choose_follower(meter)
    assert choice.protocol == "asp" and choice.ratio_low is not None and choice.ratio_low < 1.5


def test_a_record_from_before_the_bound_reads_without_it() -> None:
    plain = {"protocol": "local-3", "message_s": 0.05, "step_s": 0.02, "rounds": 12}
    assert FollowerChoice.from_plain(plain).ratio_low is None


def test_on_one_machine_asp_follows_whatever_the_ratio_and_the_record_says_why() -> None:
    # Issue 47: on this 2-core machine the ratio moved from 1.2 to 4.9 with the load.
    meter = MessageCostMeter()
    meter.add(bsp_rounds(40, message_s=0.08, steps=(0.02,)))
    choice = choose_follower(meter, one_machine=True)
    assert choice.protocol == "asp" and choice.one_machine and choice.ratio == pytest.approx(4)
    assert "shares one machine with the server" in choice.describe()
    assert FollowerChoice.from_plain(choice.to_plain()) == choice
    assert choose_follower(meter).protocol == "local-4"  # the same rounds across a network
