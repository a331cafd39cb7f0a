"""A job that names no learning rate gets its optimizer's default; one that names one keeps it."""

from pathlib import Path

import pytest

from syncswitch.cli.main import build_parser
from syncswitch.cli.train import config_from_args
from syncswitch.config import TrainConfig
from syncswitch.core.sync.server_optimizer import default_lr
from syncswitch.registry.fingerprint import describe_job


def test_sgd_keeps_its_default_and_adam_gets_its_own() -> None:
    assert TrainConfig().lr == 0.2 == default_lr("sgd")
    assert TrainConfig(optimizer="adam").lr == 1e-3
    assert TrainConfig(optimizer="adamw").lr == 1e-3


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_a_named_learning_rate_is_kept(optimizer: str) -> None:
    assert TrainConfig(optimizer=optimizer, lr=3e-3).lr == 3e-3


def test_the_resolved_rate_is_what_config_json_and_the_fingerprint_hold() -> None:
    assert TrainConfig(optimizer="adamw").to_plain()["lr"] == 1e-3
    # An SGD job that names no rate is the job it was before the default depended on the
    # optimizer: the same description, so the same fingerprint and stored decisions.
    assert describe_job(TrainConfig()) == describe_job(TrainConfig(lr=0.2))
    assert TrainConfig() == TrainConfig(lr=0.2)  # every field alike: the run is the same


def test_the_command_line_and_a_config_file_resolve_it_alike(tmp_path: Path) -> None:
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", "--optimizer", "adamw"])).lr == 1e-3
    assert config_from_args(parser.parse_args(["train"])).lr == 0.2
    job = tmp_path / "job.yaml"
    job.write_text("optimizer: adam\n")
    assert config_from_args(parser.parse_args(["train", "--config", str(job)])).lr == 1e-3
    job.write_text("optimizer: adam\nlr: 0.01\n")
    assert config_from_args(parser.parse_args(["train", "--config", str(job)])).lr == 0.01
