"""Today's job identity, pinned: the three fingerprint lists and the hashes of a few jobs.

Stored registries find their jobs by these hashes, so however the lists are produced (they
are derived from each option's declaration) they must not change.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from syncswitch.config import TrainConfig
from syncswitch.registry import (
    JOB_FIELDS,
    LATER_JOB_FIELDS,
    NOT_JOB_FIELDS,
    describe_job,
    fingerprint,
)

PINNED_JOB_FIELDS = {
    "model", "dataset", "mnist1d_samples", "workers", "servers", "batch_size", "epochs", "lr",
    "momentum", "momentum_at_switch", "momentum_ramp", "weight_decay", "lr_schedule", "warmup",
    "lr_milestones", "lr_gamma", "step_time_ms", "speed_factors", "jitter_sigma",
}  # fmt: skip
PINNED_LATER_JOB_FIELDS = {
    "stragglers", "online_policy", "greedy_return", "straggler_threshold",
    "straggler_recover_threshold", "straggler_window", "divergence_guard",
    "rollback_lr_factor", "faults",
}  # fmt: skip
# Fields named in no list today: a field nobody classified counts in the job when set, as the
# later fields do. Now that every field declares its identity, they declare exactly that, so
# LATER_JOB_FIELDS (derived: every field that counts when set) names them too.
PINNED_UNCLASSIFIED = {
    "outer_optimizer", "outer_lr", "outer_momentum", "local_lr_factor", "local_steps_rule",
    "local_inner_state", "local_server_momentum", "runtime", "cluster", "device",
    "evaluator_device", "server_device", "gpus_per_worker", "placement",
}  # fmt: skip
# Fields added after the lists were pinned: they count in the job when set, so every job
# made before them keeps its fingerprint.
PINNED_ADDED_WHEN_SET = {
    "val_fraction", "pysource_bytes", "optimizer", "betas", "eps", "async_lr",
    "staleness_lr", "staleness_lr_floor", "delay_compensation", "wire_dtype",
    "local_switch_warmup", "local_switch_lr_start", "grad_clip", "early_stop_patience",
    "early_stop_min_delta", "precision", "link_gbps", "link_latency_ms", "server_link_gbps",
}  # fmt: skip
PINNED_NOT_JOB_FIELDS = {
    "schedule", "switch_rule", "switch_threshold", "switch_floor", "switch_ceiling", "seed",
    "out", "progress", "ray_address", "data_dir", "eval_every", "checkpoint_every",
    "checkpoint_every_s", "worker_timeout_s", "max_worker_restarts", "logger", "tracking_uri",
}  # fmt: skip


def test_the_fingerprint_lists_are_todays() -> None:
    assert len(JOB_FIELDS) == len(set(JOB_FIELDS)) and set(JOB_FIELDS) == PINNED_JOB_FIELDS
    later = PINNED_LATER_JOB_FIELDS | PINNED_UNCLASSIFIED | PINNED_ADDED_WHEN_SET
    assert set(LATER_JOB_FIELDS) == later
    assert set(NOT_JOB_FIELDS) == PINNED_NOT_JOB_FIELDS
    names = {f.name for f in fields(TrainConfig)}
    assert names == PINNED_JOB_FIELDS | later | PINNED_NOT_JOB_FIELDS


def test_a_description_lists_the_job_fields_in_version_1s_order() -> None:
    # `syncswitch jobs --show` prints a stored description in its order.
    assert JOB_FIELDS == (
        "model", "dataset", "mnist1d_samples", "workers", "servers", "batch_size", "epochs",
        "lr", "momentum", "momentum_at_switch", "momentum_ramp", "weight_decay", "lr_schedule",
        "warmup", "lr_milestones", "lr_gamma", "step_time_ms", "speed_factors", "jitter_sigma",
    )  # fmt: skip
    assert list(describe_job(TrainConfig(stragglers=None, device="cpu"))) == [
        *JOB_FIELDS,
        "device",
    ]


PINNED_HASHES = {
    "default": ({}, "40025210a7dcee395b7b0f33f986279938a89ef092e40d7c880f9f1e4671c6ef"),
    "sim": (
        {"runtime": "sim", "workers": 2, "epochs": 0.2, "mnist1d_samples": 1000},
        "7335207203b6b4968a0b272cb8761970048d06f63251b6abf7849f23b3ad0125",
    ),
    "later fields set": (
        {
            "online_policy": "greedy",
            "greedy_return": True,
            "straggler_window": 5,
            "outer_optimizer": "nesterov",
            "device": "cpu",
            "placement": "spread",
        },
        "e57d5812c4be08cb01543d83a3e4d39e682ff1a4aceb5fc4a12ed95756fd8159",
    ),
    "only fields outside the job": (
        {
            "seed": 3,
            "eval_every": 0.1,
            "checkpoint_every": 0.1,
            "switch_rule": "plateau",
            "progress": False,
            "out": "x",
        },
        "40025210a7dcee395b7b0f33f986279938a89ef092e40d7c880f9f1e4671c6ef",
    ),
    "step schedule, ramp, emulation": (
        {
            "lr_schedule": "step",
            "lr_milestones": [0.3],
            "lr_gamma": 0.5,
            "momentum_at_switch": "ramp",
            "momentum_ramp": 0.2,
            "speed_factors": [1, 1, 1, 1, 1, 1, 1, 2],
            "step_time_ms": 5.0,
        },
        "f01e9e39e7ad29a7bb513b2539c882f16a5c4706fcb91495ceeb7d9d6321fe66",
    ),
}


@pytest.mark.parametrize("name", PINNED_HASHES)
def test_a_jobs_fingerprint_is_todays(name: str) -> None:
    values, expected = PINNED_HASHES[name]
    assert fingerprint(TrainConfig(**values)) == expected
