"""What a message's values become on the wire (`--wire-dtype`), and what the server does with a
float16 message that overflowed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syncswitch.core.sync.admission import DropReason
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.server_optimizer import make_optimizer
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.core.sync.wire_dtype import WireDtype, decode, encode, round_trip

VALUES = np.array([1.0, -2.5e-3, 3.14159265, 1e-30, -7e4, 1e30, 0.0], dtype=np.float32)


@pytest.mark.parametrize("dtype", list(WireDtype))
def test_encode_then_decode_is_torchs_round_to_nearest_even_and_its_bytes(dtype):
    raw = encode(VALUES, dtype)
    assert raw.nbytes == VALUES.size * dtype.itemsize
    back = decode(raw, dtype)
    expected = torch.from_numpy(VALUES).to(dtype.torch_dtype).to(torch.float32).numpy()
    np.testing.assert_array_equal(back, expected)
    np.testing.assert_array_equal(round_trip(VALUES, dtype), expected)
    assert back.dtype == np.float32


def test_float32_travels_as_it_is_and_the_narrow_kinds_round():
    assert encode(VALUES, WireDtype.FLOAT32) is VALUES
    bf16 = round_trip(VALUES, WireDtype.BFLOAT16)
    assert bf16[2] != VALUES[2] and abs(bf16[2] - VALUES[2]) <= abs(VALUES[2]) * 2**-8
    # bfloat16 keeps float32's range; float16 overflows above 65504 and underflows to 0.
    assert np.isfinite(bf16).all() and bf16[5] > 1e29
    fp16 = round_trip(VALUES, WireDtype.FLOAT16)
    assert np.isinf(fp16[4]) and np.isinf(fp16[5]) and fp16[3] == 0.0


def test_ties_round_to_even():
    # 1 + 2^-8 lies halfway between bfloat16's 1 and 1 + 2^-7: it goes to the even one, 1.
    halfway = np.array([1 + 2**-8, 1 + 3 * 2**-8], dtype=np.float32)
    np.testing.assert_array_equal(
        round_trip(halfway, WireDtype.BFLOAT16), np.array([1.0, 1 + 2**-6], np.float32)
    )


def _sync(dtype: WireDtype) -> Synchronizer:
    config = SyncConfig(
        workers=1, total_samples=1000, schedule=Schedule.parse("asp"), lr=0.1, wire_dtype=dtype
    )
    return Synchronizer(config, make_optimizer(config.optimizer, torch.zeros(4)))


def _arrive(sync: Synchronizer, sequence: int, values: np.ndarray):
    gradient = Gradient(
        worker=0,
        sequence=sequence,
        computed_version=sync.live.version,
        values=torch.from_numpy(round_trip(values, sync.config.wire_dtype)),
        samples=8,
        loss=1.0,
        step_time_s=0.01,
    )
    return sync.submit(gradient)


def test_a_float16_overflow_is_dropped_as_non_finite_and_counted_with_its_bytes():
    sync = _sync(WireDtype.FLOAT16)
    large = np.array([1.0, 7e4, 0.0, 0.0], np.float32)  # finite in float32, not in float16
    outcome = _arrive(sync, 0, large)
    assert [d.reason for d in outcome.dropped] == [DropReason.NON_FINITE]
    _arrive(sync, 1, np.ones(4, np.float32))
    accounting = sync.accounting()
    assert accounting.dropped == {DropReason.NON_FINITE: 1} and accounting.applied == 1
    assert sync.live.bytes_by_protocol["asp"] == 2 * 4 * 2  # two messages of 4 16-bit values


def test_bfloat16_takes_the_same_gradient_and_counts_half_the_bytes():
    sync = _sync(WireDtype.BFLOAT16)
    outcome = _arrive(sync, 0, np.array([1.0, 7e4, 0.0, 0.0], np.float32))
    assert not outcome.dropped and sync.live.bytes_by_protocol["asp"] == 4 * 2
    assert _sync(WireDtype.FLOAT32).gate.value_bytes == 4
