"""The switch options' check lives in the config's validation: the Python API refuses them
for a schedule with no online END as the command line does, in the same line; the command
line still names every one given, and `auto` and `--resume` set moot ones aside."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from syncswitch.cli.main import build_parser
from syncswitch.cli.train import config_for_resume
from syncswitch.config import ConfigError, TrainConfig
from syncswitch.recurring import resolve_auto_schedule
from syncswitch.registry import Registry, describe_job, fingerprint
from tests.security.helpers import one_line_error


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (
            {"schedule": "bsp:0.25,asp", "switch_rule": "plateau"},
            "--switch-rule applies to a schedule with an online END (--schedule online, or e.g. "
            "bsp:online,asp); schedule 'bsp:0.25,asp' has none: drop them or make it online",
        ),
        (
            {"schedule": "bsp", "switch_threshold": 0.3, "switch_ceiling": 0.5},
            "--switch-threshold, --switch-ceiling apply to a schedule with an online END",
        ),
    ],
)
def test_the_python_api_refuses_switch_options_without_an_online_phase(
    options: dict, line: str
) -> None:
    with pytest.raises(ConfigError) as error:
        TrainConfig(**options)
    assert line in str(error.value) and "\n" not in str(error.value)


def test_switch_options_with_an_online_phase_or_auto_are_kept() -> None:
    assert TrainConfig(schedule="bsp:online,asp", switch_rule="plateau").switch_rule == "plateau"
    assert TrainConfig(schedule="auto", switch_threshold=0.3).switch_threshold == 0.3
    with pytest.raises(ConfigError, match="online END"):
        replace(TrainConfig(switch_rule="plateau"), schedule="asp")


def test_with_schedule_sets_moot_switch_options_aside() -> None:
    config = TrainConfig(switch_rule="plateau", switch_floor=0.2, seed=4)
    fixed = config.with_schedule("bsp:0.5,asp", seed=5)
    assert (fixed.schedule, fixed.switch_rule, fixed.switch_floor, fixed.seed) == (
        "bsp:0.5,asp", "staleness", 1 / 16, 5,
    )  # fmt: skip
    assert config.with_schedule("bsp:online,asp").switch_rule == "plateau"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        # Given at its default: not caught by validation, still by the command line.
        (["--schedule", "bsp", "--switch-rule", "staleness"], "--switch-rule applies"),
        (
            ["--schedule", "asp", "--switch-rule", "plateau", "--switch-floor", "0.0625"],
            "--switch-rule, --switch-floor apply",
        ),
    ],
)
def test_the_command_line_names_every_switch_option_given(
    capsys, tmp_path: Path, argv: list[str], named: str
) -> None:
    err = one_line_error(capsys, ["train", "--runtime", "sim", "--out", str(tmp_path), *argv])
    assert named in err and "to a schedule with an online END" in err


def test_the_python_apis_auto_sets_switch_options_aside_for_a_stored_share(tmp_path) -> None:
    registry = tmp_path / "registry.db"
    job = TrainConfig(runtime="sim", workers=2, epochs=0.2, mnist1d_samples=1000)
    with Registry(str(registry)) as store:
        stored = store.ensure_job(fingerprint(job), describe_job(job))
        store.record_decision(
            stored, fraction=0.5, tolerance=0.5, repeats=1, evidence={}, reason="a test"
        )
    auto = replace(job, schedule="auto", switch_threshold=0.3)
    resolved, source = resolve_auto_schedule(auto, str(registry))
    assert source["kind"] == "registry" and resolved.schedule == "bsp:0.5,asp"
    assert resolved.switch_threshold is None and fingerprint(resolved) == fingerprint(job)


def test_resume_leaves_out_switch_options_a_fixed_schedule_made_moot(tmp_path: Path) -> None:
    # A run started under `--schedule auto` before they were set aside kept them.
    saved = {**TrainConfig(schedule="bsp:0.5,asp").to_plain(), "switch_threshold": 0.3}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    args = build_parser().parse_args(["train", "--resume", str(tmp_path)])
    config = config_for_resume(args)
    assert config.schedule == "bsp:0.5,asp" and config.switch_threshold is None
