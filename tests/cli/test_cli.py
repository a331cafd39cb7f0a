"""The command line: help, clear one-line errors for user mistakes, and a real run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from syncswitch.rundir import read_summary
from tests.security.helpers import one_line_error


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
        (["--optimizer", "lamb"], "choose one of sgd, adam, adamw"),
        (["--betas", "0.9,0.99"], "--betas is Adam's: give --optimizer adam or adamw"),
        (["--optimizer", "adam", "--momentum", "0.5"], "momentum = 0.5 is SGD's"),
        (["--optimizer", "adamw", "--betas", "0.9,1.0"], "betas = 0.9,1: give two values"),
        (["--optimizer", "adamw", "--betas", "0.9"], "betas = 0.9: give two values"),
        (["--optimizer", "adam", "--eps", "0"], "eps = 0"),
        (["--async-lr", "sqrt"], "choose one of linear, none"),
        (["--grad-clip", "0"], "grad_clip = 0.0 is not allowed; it must be > 0"),
        (["--grad-clip", "-1"], "grad_clip = -1.0 is not allowed"),
        (["--early-stop-patience", "-1"], "early_stop_patience = -1"),
        (["--early-stop-min-delta", "0.1"], "does nothing without --early-stop-patience"),
    ],
)
def test_bad_input_gets_one_line_naming_value_and_allowed(capsys, argv, fragment) -> None:
    assert fragment in one_line_error(capsys, ["train", *argv])


def test_missing_cifar_directory_names_the_expected_path(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    err = one_line_error(
        capsys, ["train", "--dataset", "cifar10", "--data-dir", str(missing), "--no-progress"]
    )
    assert str(missing) in err and "never downloads" in err


def test_a_new_run_never_writes_into_an_earlier_runs_directory(capsys, tmp_path: Path) -> None:
    used = tmp_path / "run"
    (used / "checkpoints").mkdir(parents=True)
    (used / "config.json").write_text("{}")
    err = one_line_error(capsys, ["train", "--out", str(used), "--no-progress"])
    assert "already holds a run (config.json, checkpoints)" in err and "--resume" in err
    assert sorted(p.name for p in used.iterdir()) == ["checkpoints", "config.json"]


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
    err = one_line_error(capsys, ["train", "--config", str(bad)])
    assert "unknown key 'wrokers' (did you mean 'workers'?)" in err
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text("workers: !!python/object/apply:os.system ['touch pwned']\n")
    assert "cannot be parsed" in one_line_error(capsys, ["train", "--config", str(unsafe)])
    assert not Path("pwned").exists()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("- {workers: [9], start: 0.1, duration: 0.1, delay_ms: 30}", "worker 9 does not exist"),
        ("- {workers: [1], start: 0.1, duration: -0.1, delay_ms: 30}", "'duration' must be > 0"),
        (
            "- {workers: [1], start: 0.1, start_s: 2, duration: 0.1, delay_ms: 30}",
            "either 'start' or 'start_s', not both",
        ),
        ("- {workers: [1], start: 0.1, duration: 0.1, delay_ms: 30, factor: 2}", "not both"),
        ("- {workers: [1], strat: 0.1, duration: 0.1, delay_ms: 30}", "did you mean 'start'"),
        ("- {paper: {stragglers: 2, delay_ms: 30}}", "missing occurrences"),
        ("- {random: {count: 9, duration: 0.2, delay_ms: 10}}", "do not fit"),
        ("workers: 3", "must hold a list"),
    ],
)
def test_bad_straggler_scenarios_are_refused_in_one_line(
    capsys, tmp_path: Path, content: str, fragment: str
) -> None:
    spec = tmp_path / "stragglers.yaml"
    spec.write_text(content + "\n")
    assert fragment in one_line_error(capsys, ["train", "--stragglers", str(spec)])


def test_straggler_policy_options_are_checked(capsys) -> None:
    err = one_line_error(capsys, ["train", "--greedy-return"])
    assert "greedy_return applies to online_policy greedy" in err
    for flag in ("--straggler-policy", "--online-policy"):
        err = one_line_error(capsys, ["train", flag, "lazy"])
        assert "choose one of none, greedy, elastic" in err
    err = one_line_error(capsys, ["train", "--straggler-threshold", "0.9"])
    assert "threshold 0.9 must be > 1" in err


def test_straggler_file_may_be_toml_and_generators_expand(tmp_path: Path) -> None:
    import argparse

    from syncswitch.cli.train import add_parser, config_from_args

    spec = tmp_path / "stragglers.toml"
    spec.write_text(
        "[[stragglers]]\nworkers = [1]\nstart_s = 2.0\nduration_s = 1.5\nfactor = 3.0\n"
        "[[stragglers]]\npaper = {stragglers = 2, delay_ms = 30, occurrences = 4}\n"
    )
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = ["train", "--stragglers", str(spec), "--schedule", "bsp:0.25,asp"]
    scenario = config_from_args(parser.parse_args(args)).parsed.scenario
    assert len(scenario.episodes) == 5
    paper = [e for e in scenario.episodes if e.delay_ms == 30]
    assert len(paper) == 4 and all(len(e.workers) == 2 for e in paper)
    assert all(e.start + e.duration <= 0.25 for e in paper)  # inside the BSP phase


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
            "2",
            "--mnist1d-samples",
            "400",
            "--no-progress",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # --json: stdout is the machine-readable summary alone.
    printed = json.loads(proc.stdout)
    assert printed["run_dir"] == str(out) and printed["status"] == "complete"
    summary = read_summary(out)
    # The default schedule is online: the run left BSP where it decided, within the bounds,
    # and stored that share for `--schedule auto` (in this test's own registry).
    timing = summary.online_timing
    assert summary.schedule == "online" and timing is not None and timing.switched
    assert summary.complete and summary.switches[0].to_protocol == "asp"
    assert timing.at_fraction == pytest.approx(summary.switches[0].at_fraction)
    # (the shards end the phase at the ceiling on their own: within one round of 64 samples)
    assert timing.floor <= timing.at_fraction <= timing.ceiling + 64 / 640  # type: ignore[operator]
    stored = "stored the online run's BSP share" in proc.stderr
    assert stored == (timing.reason == "signal"), proc.stderr  # a ceiling's share is not kept
    assert printed["final_value"] == summary.final_value


@pytest.mark.parametrize("flag", ["--straggler-policy", "--online-policy"])
def test_the_straggler_policy_flag_and_its_old_spelling_set_one_option(flag: str) -> None:
    import argparse

    from syncswitch.cli.train import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    config = config_from_args(parser.parse_args(["train", flag, "elastic"]))
    # The option keeps its key (config files, config.json): old run directories read.
    assert config.online_policy == "elastic"
