"""`--schedule auto`: the stored decision for exactly this job, else the default with a hint."""

from dataclasses import replace
from pathlib import Path

import pytest

from syncswitch.config import ConfigError, TrainConfig
from syncswitch.recurring import DEFAULT_SCHEDULE, describe_source, resolve_auto_schedule
from syncswitch.registry import JOB_FIELDS, Registry, RegistryError, fingerprint

JOB = TrainConfig(
    workers=4, epochs=3.0, mnist1d_samples=1000, step_time_ms=5.0, schedule="auto", seed=3
)

# For each fingerprint field, a value that makes another job (with what it depends on).
OTHER_JOB = {
    "model": {"model": "resnet20"},
    "dataset": {"dataset": "cifar10", "model": "cnn1d"},
    "mnist1d_samples": {"mnist1d_samples": 2000},
    "workers": {"workers": 2},
    "servers": {"servers": 2},
    "batch_size": {"batch_size": 16},
    "epochs": {"epochs": 4.0},
    "lr": {"lr": 0.1},
    "momentum": {"momentum": 0.5},
    "momentum_at_switch": {"momentum_at_switch": "zero"},
    "momentum_ramp": {"momentum_at_switch": "ramp", "momentum_ramp": 0.2},
    "weight_decay": {"weight_decay": 1e-4},
    "lr_schedule": {"lr_schedule": "constant"},
    "warmup": {"warmup": 0.1},
    "lr_milestones": {"lr_schedule": "step", "lr_milestones": [0.4]},
    "lr_gamma": {"lr_schedule": "step", "lr_gamma": 0.3},
    "step_time_ms": {"step_time_ms": 10.0},
    "speed_factors": {"speed_factors": [1, 1, 1, 2]},
    "jitter_sigma": {"jitter_sigma": 0.1},
}


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A registry holding a decision (fraction 1/8) for JOB."""
    path = tmp_path / "registry.db"
    with Registry(path) as registry:
        job = registry.ensure_job(fingerprint(JOB), {})
        registry.record_decision(
            job, fraction=0.5, tolerance=0.5, repeats=2, evidence={}, reason="older"
        )
        registry.record_decision(
            job, fraction=0.125, tolerance=0.5, repeats=2, evidence={}, reason="latest"
        )
    return path


def test_a_stored_decision_is_reused_with_its_id(stored: Path) -> None:
    config, source = resolve_auto_schedule(JOB, str(stored))
    assert config.schedule == "bsp:0.125,asp" and config.seed == 3
    assert source["kind"] == "registry" and source["decision_id"] == 2
    assert source["fraction"] == 0.125 and source["fingerprint"] == fingerprint(JOB)
    assert "decision #2" in describe_source(source)
    config.parsed_schedule()  # a concrete schedule now


def test_a_new_seed_is_the_same_job(stored: Path) -> None:
    _, source = resolve_auto_schedule(replace(JOB, seed=11, out="elsewhere"), str(stored))
    assert source["kind"] == "registry"


def test_full_bsp_decision_runs_bsp(tmp_path: Path) -> None:
    with Registry(tmp_path / "r.db") as registry:
        job = registry.ensure_job(fingerprint(JOB), {})
        registry.record_decision(
            job, fraction=1.0, tolerance=0.5, repeats=1, evidence={}, reason=""
        )
    config, _ = resolve_auto_schedule(JOB, str(tmp_path / "r.db"))
    assert config.schedule == "bsp"


@pytest.mark.parametrize("field", JOB_FIELDS)
def test_a_job_differing_in_any_fingerprint_field_gets_the_default(stored, field) -> None:
    other = replace(JOB, **OTHER_JOB[field])
    config, source = resolve_auto_schedule(other, str(stored))
    assert source["kind"] == "default" and config.schedule == DEFAULT_SCHEDULE
    assert source["hint"].startswith(f"no stored decision for job {fingerprint(other)[:12]}")
    assert "syncswitch search" in source["hint"]


def test_no_registry_yet_gives_the_default_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nothing" / "registry.db"
    config, source = resolve_auto_schedule(JOB, str(missing))
    assert config.schedule == DEFAULT_SCHEDULE and source["kind"] == "default"
    assert not missing.parent.exists()


def test_a_corrupt_registry_is_an_error_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    path.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(RegistryError, match="not a SQLite database"):
        resolve_auto_schedule(JOB, str(path))
    assert path.read_bytes() == b"\x00garbage" * 100


def test_a_given_schedule_is_left_alone_and_auto_never_reaches_training() -> None:
    given = replace(JOB, schedule="bsp:0.5,asp")
    assert resolve_auto_schedule(given) == (given, {"kind": "given"})
    with pytest.raises(ConfigError, match="must be resolved before training"):
        JOB.parsed_schedule()
