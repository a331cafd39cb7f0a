"""The one unknown-key check used by every reader of a user's mapping."""

import pytest

from syncswitch.config import make_config
from syncswitch.core.cluster.model import ClusterError, parse_cluster
from syncswitch.core.reliability.faults import FaultError, parse_faults
from syncswitch.errors import ConfigError
from syncswitch.keys import did_you_mean, unknown_key_problem


def test_names_the_first_unknown_key_a_close_match_and_what_is_allowed() -> None:
    assert unknown_key_problem({"a": 1, "wrokers": 2}, ("a", "workers")) == (
        "unknown key 'wrokers' (did you mean 'workers'?); allowed keys are a, workers"
    )
    assert unknown_key_problem({"a": 1}, ("a",)) is None
    assert did_you_mean("zzz", ("workers",)) == ""


def test_a_hostile_key_stays_one_short_line() -> None:
    problem = unknown_key_problem({"x\n" * 1000: 1}, ("a",), "the options")
    assert problem is not None and "\n" not in problem and len(problem) < 120


@pytest.mark.parametrize(
    ("read", "error"),
    [
        (lambda: parse_faults([{"kind": "crash", "worker": 0, "att": 0.5}], 2), FaultError),
        (lambda: parse_cluster({"network": {"latency": 1}}), ClusterError),
        (lambda: make_config({"wrokers": 2}), ConfigError),
    ],
)
def test_every_reader_says_it_the_same_way(read, error) -> None:
    with pytest.raises(error, match=r"unknown key '\w+' \(did you mean '\w+'\?\); allowed keys"):
        read()
