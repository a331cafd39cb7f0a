"""Best weights (control/best.py) and early stopping's rule (control/early_stopping.py): the
rule, the record, the checkpoint."""

import numpy as np
import pytest
import torch

from syncswitch.config import TrainConfig
from syncswitch.control.best import BestKeeper
from syncswitch.control.best_weights import BestWeights
from syncswitch.control.early_stopping import early_stop_reason
from syncswitch.control.evaluations import Evaluated, MetricsRow
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.core.sync.records import EvalPoint
from syncswitch.core.sync.state import StateFormatError
from syncswitch.records.metric import MetricSpec

ACCURACY = MetricSpec("accuracy", higher_is_better=True)
LOSS = MetricSpec("loss", higher_is_better=False)


def row(value: float, samples: int = 0) -> MetricsRow:
    return MetricsRow(0.0, samples, 0.0, 0, "bsp", {"m": value}, 0.0, None)


def test_early_stopping_waits_patience_evaluations_without_a_large_enough_gain() -> None:
    values = [0.5, 0.6, 0.62, 0.61]
    rows = [row(v) for v in values]
    assert early_stop_reason(rows, ACCURACY, patience=0, min_delta=0.0) is None  # off
    assert early_stop_reason(rows, ACCURACY, patience=2, min_delta=0.0) is None  # 0.62 > 0.6
    reason = early_stop_reason(rows, ACCURACY, patience=2, min_delta=0.05)
    assert reason is not None and "in 2 evaluations" in reason
    assert early_stop_reason(rows[:2], ACCURACY, patience=2, min_delta=0.05) is None  # too few
    losses = [row(v) for v in (1.0, 0.9, 0.89)]  # lower is better
    assert early_stop_reason(losses, LOSS, patience=1, min_delta=0.0) is None
    assert early_stop_reason(losses, LOSS, patience=1, min_delta=0.05) is not None


def test_nan_evaluations_do_not_count_as_improvements() -> None:
    rows = [row(0.5), row(float("nan")), row(float("nan"))]
    assert early_stop_reason(rows, ACCURACY, patience=2, min_delta=0.0) is not None


def best(value: float, samples: int, size: int = 3) -> BestWeights:
    return BestWeights(value, samples, samples // 10, samples / 1000, np.full(size, value, "f4"))


def test_the_best_weights_round_trip_and_a_malformed_entry_is_one_line() -> None:
    record = RunRecord(bests=[best(0.1, 100), best(0.3, 200)])
    again = RunRecord.from_plain(record.to_plain())
    assert len(again.bests) == 1  # only the best is checkpointed
    assert again.bests[0].describe() == record.bests[-1].describe()
    assert np.array_equal(again.bests[0].weights, record.bests[-1].weights)
    assert RunRecord.from_plain({**record.to_plain(), "bests": []}).bests == []
    plain = record.to_plain()
    for broken in (
        {**plain["bests"][0], "weights": torch.zeros(2, 2)},
        {**plain["bests"][0], "weights": torch.zeros(3, dtype=torch.float64)},
        {**plain["bests"][0], "samples": -1},
        {**plain["bests"][0], "value": "high"},
        "weights",
    ):
        with pytest.raises(StateFormatError) as error:
            BestWeights.from_plain(broken)
        assert "\n" not in str(error.value)
    with pytest.raises(StateFormatError, match="hold 3 values, the model 5"):
        BestWeights.from_plain(plain["bests"][0], parameters=5)


def evaluated(value: float, samples: int) -> Evaluated:
    point = EvalPoint(samples / 1000, samples, samples // 10, 0.0, "bsp")
    return Evaluated(point, {"accuracy": value, "loss": 1.0}, 0.0, "validation")


def test_the_keeper_keeps_each_new_best() -> None:
    # Its stop moved to the EarlyStopping callback (tests/control/test_callbacks.py).
    plan = RunPlan.resolve(TrainConfig(early_stop_patience=1, runtime="sim"), 1000)
    record, saved = RunRecord(), []
    keeper = BestKeeper(record, plan, saved.append)
    for value, samples in [(0.5, 100), (0.7, 200), (0.6, 300), (0.65, 400)]:
        item = evaluated(value, samples)
        record.metrics.append(item.metric_row())
        keeper.observe(item, np.full(2, value, "f4"))
    keeper.observe(evaluated(0.1, 500), None)  # no weights: not kept
    assert [b.samples for b in record.bests] == [100, 200]
    assert saved == []  # written with checkpoints and at the end only
    keeper.checkpointed()
    assert saved == []  # no checkpoint since
    record.checkpoints += 1
    keeper.checkpointed()
    keeper.flush()
    assert [float(w[0]) for w in saved] == [pytest.approx(0.7)]  # once
