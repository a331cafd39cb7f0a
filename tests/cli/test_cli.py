"""The command line: help, clear one-line errors for user mistakes, and a real run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from syncswitch.cli.main import main


def error_of(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--workers", "0"], "workers = 0"),
        (["--workers", "two"], "must be an integer"),
        (["--schedule", "xsp"], "unknown protocol 'xsp'"),
        (["--schedule", "bsp:0.6,asp:0.3,bsp"], "must increase"),
        (["--schedule", "bsp:1.2,asp"], "strictly between 0 and 1"),
        (["--schedule", "bsp:0,asp"], "strictly between 0 and 1"),
        (["--momentum-at-switch", "double"], "choose one of keep, scale, zero, ramp"),
        (["--momentum", "1.5"], "momentum = 1.5"),
        (["--dataset", "imagenet"], "choose one of mnist1d, cifar10, cifar100"),
        (["--speed-factors", "1,2", "--workers", "3"], "one factor per worker"),
    ],
)
def test_bad_input_gets_one_line_naming_value_and_allowed(capsys, argv, fragment) -> None:
    assert fragment in error_of(capsys, ["train", *argv])


def test_missing_cifar_directory_names_the_expected_path(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    err = error_of(
        capsys, ["train", "--dataset", "cifar10", "--data-dir", str(missing), "--no-progress"]
    )
    assert str(missing) in err and "never downloads" in err


def test_config_file_keys_mirror_flags_and_unknown_keys_are_refused(capsys, tmp_path) -> None:
    from syncswitch.cli.train import add_parser, config_from_args

    good = tmp_path / "job.yaml"
    good.write_text("workers: 4\nschedule: bsp:0.5,asp\nmomentum-at-switch: ramp\n")
    toml = tmp_path / "job.toml"
    toml.write_text("workers = 3\nlr = 0.05\n")
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    config = config_from_args(parser.parse_args(["train", "--config", str(good), "--seed", "3"]))
    assert (config.workers, config.schedule, config.momentum_at_switch, config.seed) == (
        4,
        "bsp:0.5,asp",
        "ramp",
        3,
    )
    assert config_from_args(parser.parse_args(["train", "--config", str(toml)])).lr == 0.05
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers: 4\nwrokers: 5\n")
    assert "unknown key(s) wrokers" in error_of(capsys, ["train", "--config", str(bad)])
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text("workers: !!python/object/apply:os.system ['touch pwned']\n")
    assert "cannot be parsed" in error_of(capsys, ["train", "--config", str(unsafe)])
    assert not Path("pwned").exists()


def test_help_explains_every_option() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "syncswitch.cli.main", "train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in (
        "--workers",
        "--schedule",
        "--epochs",
        "--batch-size",
        "--lr",
        "--momentum",
        "--momentum-at-switch",
        "--seed",
        "--out",
        "--dataset",
        "--model",
        "--step-time-ms",
        "--speed-factors",
        "--jitter-sigma",
        "--config",
        "--ray-address",
        "--servers",
    ):
        assert flag in out


@pytest.mark.ray
def test_train_command_runs_a_job_and_says_where_results_are(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "syncswitch.cli.main",
            "train",
            "--workers",
            "2",
            "--epochs",
            "0.5",
            "--mnist1d-samples",
            "400",
            "--no-progress",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"results written to {out}" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["switches"][0]["to"] == "asp"
