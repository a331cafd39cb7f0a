"""Job identity: the same job hashes alike however it is spelled; any job field changes it."""

import hashlib
import json
from dataclasses import dataclass, fields

import pytest

from syncswitch.config import TrainConfig
from syncswitch.registry.fingerprint import (
    FINGERPRINT_VERSION,
    JOB_FIELDS,
    LATER_JOB_FIELDS,
    NOT_JOB_FIELDS,
    describe_job,
    fingerprint,
)

# Every job field given explicitly, so a changed default elsewhere does not move this value.
EXPLICIT = dict(
    model="cnn1d",
    dataset="mnist1d",
    mnist1d_samples=10000,
    workers=8,
    servers=1,
    batch_size=32,
    epochs=80.0,
    lr=0.2,
    momentum=0.9,
    momentum_at_switch="scale",
    momentum_ramp=0.1,
    weight_decay=0.0,
    lr_schedule="cosine",
    warmup=0.0,
    lr_milestones=None,
    lr_gamma=0.1,
    step_time_ms=20.0,
    speed_factors=None,
    jitter_sigma=0.2,
)


def test_the_hash_is_stable_across_releases() -> None:
    # If this fails, every stored decision stops matching its job: bump FINGERPRINT_VERSION
    # only on purpose, and say so in the README.
    assert fingerprint(TrainConfig(**EXPLICIT)) == (
        "dffe025eaf3d3d69ec1b6272f5748e091fe3a3c6b05142d484f76d195aefb65d"
    )


def test_the_hash_is_sha256_of_canonical_json_as_documented() -> None:
    config = TrainConfig(**EXPLICIT)
    canonical = json.dumps(
        {"v": FINGERPRINT_VERSION, "job": describe_job(config)},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert fingerprint(config) == hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 9},
        {"out": "elsewhere"},
        {"progress": False},
        {"ray_address": "ray://head:10001"},
        {"schedule": "bsp"},
        {"schedule": "auto"},
        {"data_dir": "/data"},
        {"eval_every": 0.5},
        {"model": None},  # the default model for mnist1d, named or not
        {"epochs": 80},  # int or float
        {"lr_gamma": 0.5},  # irrelevant without --lr-schedule step
        {"momentum_ramp": 0.3},  # irrelevant unless --momentum-at-switch ramp
        {"speed_factors": []},
    ],
)
def test_what_is_not_the_job_does_not_change_it(change) -> None:
    assert fingerprint(TrainConfig(**{**EXPLICIT, **change})) == fingerprint(
        TrainConfig(**EXPLICIT)
    )


CHANGED = {
    "model": "resnet20",
    "dataset": "cifar10",
    "mnist1d_samples": 4000,
    "workers": 4,
    "servers": 2,
    "batch_size": 64,
    "epochs": 40.0,
    "lr": 0.1,
    "momentum": 0.8,
    "momentum_at_switch": "keep",
    "momentum_ramp": 0.3,
    "weight_decay": 1e-4,
    "lr_schedule": "step",
    "warmup": 0.05,
    "lr_milestones": [0.3],
    "lr_gamma": 0.5,
    "step_time_ms": 30.0,
    "speed_factors": [1, 1, 1, 1, 1, 1, 1, 3],
    "jitter_sigma": 0.1,
}


@pytest.mark.parametrize("name", JOB_FIELDS)
def test_every_job_field_changes_the_fingerprint(name: str) -> None:
    change = {name: CHANGED[name]}
    # Fields that only matter together with another option are changed along with it.
    if name == "momentum_ramp":
        change["momentum_at_switch"] = "ramp"
    if name in ("lr_milestones", "lr_gamma"):
        change["lr_schedule"] = "step"
        base = TrainConfig(**{**EXPLICIT, "lr_schedule": "step"})
    else:
        base = TrainConfig(**EXPLICIT)
    assert fingerprint(TrainConfig(**{**EXPLICIT, **change})) != fingerprint(base)


def test_fields_are_classified_in_one_place() -> None:
    assert not set(JOB_FIELDS) & set(NOT_JOB_FIELDS)
    assert not set(LATER_JOB_FIELDS) & (set(JOB_FIELDS) | set(NOT_JOB_FIELDS))
    names = {f.name for f in fields(TrainConfig)}
    first = ("schedule", "seed", "out", "progress", "ray_address", "data_dir", "eval_every")
    assert set(JOB_FIELDS) <= names and set(first) <= names and set(first) <= set(NOT_JOB_FIELDS)


def test_a_field_added_later_counts_only_when_set() -> None:
    # A field nobody has classified yet is treated like the listed later additions.
    @dataclass(frozen=True)
    class NewerConfig(TrainConfig):
        future_knob: float = 1.0

    old = fingerprint(TrainConfig(**EXPLICIT))
    assert fingerprint(NewerConfig(**EXPLICIT)) == old
    newer = NewerConfig(**EXPLICIT, future_knob=2.0)
    assert fingerprint(newer) != old and describe_job(newer)["future_knob"] == 2.0


def test_online_policy_settings_count_when_present_and_set() -> None:
    names = {f.name for f in fields(TrainConfig)}
    if "online_policy" not in names:
        pytest.skip("TrainConfig has no online policies yet")
    elastic = TrainConfig(**EXPLICIT, online_policy="elastic")
    assert fingerprint(elastic) != fingerprint(TrainConfig(**EXPLICIT))


def test_a_pysource_job_is_also_its_text() -> None:
    from syncswitch.workloads.identity import Workload
    from syncswitch.workloads.pysource import read_corpus

    job = TrainConfig(dataset="pysource")
    described = describe_job(job)
    assert described["corpus_sha256"] == read_corpus(job.pysource_bytes).sha256
    assert described["model"] == "char-transformer"
    # Another size is another text; another interpreter's text (another checksum recorded
    # by the run) is another job.
    assert fingerprint(TrainConfig(dataset="pysource", pysource_bytes=100_000)) != fingerprint(job)
    elsewhere = Workload("pysource", "char-transformer", corpus_sha256="0" * 64)
    assert fingerprint(job, elsewhere) != fingerprint(job)
    here = Workload("pysource", "char-transformer", read_corpus(job.pysource_bytes).sha256)
    assert fingerprint(job, here) == fingerprint(job)


def test_the_pysource_options_leave_other_jobs_alone() -> None:
    plain = TrainConfig(**EXPLICIT)
    assert "corpus_sha256" not in describe_job(plain)
    assert fingerprint(TrainConfig(**EXPLICIT, pysource_bytes=100_000)) == fingerprint(plain)


def test_the_staleness_rules_count_only_when_set() -> None:
    asp = {**EXPLICIT, "schedule": "bsp:0.25,asp"}
    plain = fingerprint(TrainConfig(**asp))
    assert fingerprint(TrainConfig(**asp, staleness_lr="none", delay_compensation=0.0)) == plain
    inverse = TrainConfig(**asp, staleness_lr="inverse")
    floored = TrainConfig(**asp, staleness_lr="inverse", staleness_lr_floor=0.5)
    compensated = TrainConfig(**asp, delay_compensation=0.04)
    prints = {fingerprint(c) for c in (inverse, floored, compensated)}
    assert len(prints) == 3 and plain not in prints
