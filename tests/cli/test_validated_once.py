"""A job is validated once per run and what validation parses is parsed once: the schedule,
and the simulator's cluster file (a file read twice could change in between)."""

from collections import Counter
from pathlib import Path

import pytest

import syncswitch.config.components as components_module
from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.core.sync.protocol import Schedule

JOB = [
    "train", "--runtime", "sim", "--workers", "2", "--epochs", "1", "--mnist1d-samples", "200",
    "--batch-size", "16", "--eval-every", "0.5", "--no-progress", "--json",
]  # fmt: skip


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """Counts TrainConfig validations, schedule parses and structured-file reads."""
    seen: Counter = Counter()
    validate, parse, read = (
        TrainConfig._validate,
        Schedule.parse.__func__,
        components_module.read_structured_file,
    )

    def counted_validate(self) -> None:
        seen["validate"] += 1
        validate(self)

    def counted_parse(cls, text: str) -> Schedule:
        seen["schedule"] += 1
        return parse(cls, text)

    def counted_read(path, what):
        seen[what] += 1
        return read(path, what)

    monkeypatch.setattr(TrainConfig, "_validate", counted_validate)
    monkeypatch.setattr(Schedule, "parse", classmethod(counted_parse))
    monkeypatch.setattr(components_module, "read_structured_file", counted_read)
    return seen


def test_a_train_run_validates_its_job_once_and_parses_its_files_once(
    calls: Counter, tmp_path: Path, capsys
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: here\nnetwork: {latency_ms: 0.1}\n")
    argv = [*JOB, "--cluster", str(cluster), "--out", str(tmp_path / "run")]
    assert main(argv) == 0, capsys.readouterr().err
    assert calls == {"validate": 1, "schedule": 1, "cluster file": 1}


def test_an_auto_schedule_builds_the_job_as_given_then_the_job_that_runs(
    calls: Counter, tmp_path: Path, capsys
) -> None:
    argv = [*JOB, "--schedule", "auto", "--registry", str(tmp_path / "jobs.db")]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    # 'auto' is never parsed as a schedule; the resolved one is, once.
    assert calls == {"validate": 2, "schedule": 1}


def test_a_config_is_frozen_and_keeps_what_it_parsed() -> None:
    config = TrainConfig(schedule="bsp:0.5,asp", stragglers=[{"workers": 0, "start": 0.1,
                         "duration": 0.1, "delay_ms": 5}])  # fmt: skip
    with pytest.raises(AttributeError):
        config.workers = 3  # type: ignore[misc]
    assert config.parsed_schedule() is config.parsed_schedule()
    assert config.parsed.emulation.stragglers is config.parsed.scenario
