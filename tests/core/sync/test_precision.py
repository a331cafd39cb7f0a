"""`--precision`'s autocast context and its option: float32 is no autocast at all; bf16-mixed
is CPU or CUDA autocast to bfloat16; a value outside the two is refused in one line."""

from __future__ import annotations

import pytest
import torch

from syncswitch.config import TrainConfig
from syncswitch.core.sync.precision import Precision, forward_precision
from syncswitch.errors import ConfigError
from syncswitch.rundir.summary import PRECISIONS


def test_float32_is_no_autocast_at_all():
    with forward_precision(Precision.FLOAT32, torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
    with forward_precision(Precision.BF16_MIXED, torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") is torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")  # left as it was found


def test_float32_is_the_default_and_a_bad_precision_is_refused_in_one_line():
    assert TrainConfig().precision == "32"
    assert TrainConfig(precision="bf16-mixed").precision == "bf16-mixed"
    for bad in ("bf16", "16-mixed", "fp32"):
        with pytest.raises(ConfigError) as refused:
            TrainConfig(precision=bad)
        message = str(refused.value)
        assert "\n" not in message
        assert repr(bad) in message and "32, bf16-mixed" in message


def test_the_summary_reads_every_precision():
    # rundir/summary.py spells the values itself (it reads summaries without torch).
    assert tuple(p.value for p in Precision) == PRECISIONS
