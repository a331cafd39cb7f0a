"""`syncswitch search` and `syncswitch jobs` on the command line (no training here)."""

import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.registry import Registry, TrialRecord, describe_job, fingerprint
from tests.security.helpers import one_line_error


def help_of(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_search_help_explains_job_and_search_options(capsys) -> None:
    out = help_of(capsys, "search")
    for flag in (
        "--workers",
        "--epochs",
        "--lr",
        "--step-time-ms",
        "--seed",
        "--config",
        "--tolerance",
        "--repeats",
        "--resolution",
        "--max-trials",
        "--parallel",
        "--registry",
        "--search-dir",
        "--no-progress",
    ):
        assert flag in out
    # The search sets these per trial; they are not options of it.
    options = out.split("options:")[1].split("examples:")[0]
    assert "--schedule" not in options and "--out " not in options


def test_jobs_and_train_help_mention_the_registry(capsys) -> None:
    assert "--show" in help_of(capsys, "jobs") and "--registry" in help_of(capsys, "jobs")
    train = help_of(capsys, "train")
    assert "--registry" in train and "'auto'" in train


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--tolerance", "-1"], "tolerance = -1"),
        (["--tolerance", "lots"], "tolerance = 'lots'"),
        (["--repeats", "0"], "repeats = 0"),
        (["--resolution", "1/0"], "resolution = '1/0'"),
        (["--resolution", "0.9"], "resolution = 0.9"),
        (["--max-trials", "3"], "max_trials = 3"),
        (["--parallel", "0"], "parallel = 0"),
        (["--parallel", "some"], "parallel = 'some'"),
        (["--workers", "0"], "workers = 0"),
    ],
)
def test_bad_search_input_gets_one_line_before_anything_runs(capsys, tmp_path, argv, fragment):
    registry = tmp_path / "registry.db"
    assert fragment in one_line_error(capsys, ["search", "--registry", str(registry), *argv])
    assert not registry.exists()


def test_a_corrupt_registry_is_one_line_for_every_command(capsys, tmp_path) -> None:
    path = tmp_path / "registry.db"
    garbage = bytes(range(256)) * 8
    path.write_bytes(garbage)
    for argv in (
        ["jobs", "--registry", str(path)],
        ["search", "--registry", str(path), "--workers", "2"],
        ["train", "--schedule", "auto", "--registry", str(path), "--workers", "2"],
    ):
        assert "is not a SQLite database" in one_line_error(capsys, argv)
    assert path.read_bytes() == garbage


def test_jobs_without_a_registry_says_so_and_creates_nothing(capsys, tmp_path) -> None:
    missing = tmp_path / "none.db"
    assert main(["jobs", "--registry", str(missing)]) == 0
    assert "no registry" in capsys.readouterr().out and not missing.exists()


def test_jobs_lists_jobs_and_shows_one(capsys, tmp_path) -> None:
    path = tmp_path / "registry.db"
    config = TrainConfig(workers=4, step_time_ms=20, jitter_sigma=0.2)
    other = TrainConfig(workers=2)
    with Registry(path) as registry:
        job = registry.ensure_job(fingerprint(config), describe_job(config))
        registry.ensure_job(fingerprint(other), describe_job(other))
        registry.record_trial(job, TrialRecord(1.0, 0, "bsp", "complete", 0.965, 117.0, "/r/a"))
        registry.record_trial(
            job, TrialRecord(0.125, 0, "bsp:0.125,asp", "complete", 0.962, 80.0, "/r/b", None, 2)
        )
        registry.record_decision(
            job, fraction=0.125, tolerance=0.5, repeats=1, evidence={}, reason="because"
        )
    assert main(["jobs", "--registry", str(path)]) == 0
    out = capsys.readouterr().out
    assert fingerprint(config)[:12] in out and fingerprint(other)[:12] in out
    assert "1/8 (#1" in out and "20 ms, jitter 0.2" in out and "2/2" in out
    assert main(["jobs", "--registry", str(path), "--show", fingerprint(config)[:8]]) == 0
    out = capsys.readouterr().out
    assert fingerprint(config) in out and "96.20" in out and "2 at once" in out
    assert "decision #1" in out and "because" in out
    stored = (fingerprint(config), fingerprint(other))
    missing = next(c for c in "0123456789abcdef" if not any(f.startswith(c) for f in stored))
    assert f"no job's fingerprint starts with '{missing}'" in one_line_error(
        capsys, ["jobs", "--registry", str(path), "--show", missing]
    )
    assert "give more characters" in one_line_error(
        capsys, ["jobs", "--registry", str(path), "--show", ""]
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--schedule", "bsp:0.25,asp", "--switch-rule", "plateau"],
        ["--schedule", "bsp", "--switch-threshold", "0.3", "--switch-ceiling", "0.5"],
    ],
)
def test_switch_options_without_an_online_phase_are_refused(capsys, tmp_path, argv) -> None:
    err = one_line_error(capsys, ["train", "--runtime", "sim", "--out", str(tmp_path), *argv])
    assert "to a schedule with an online END" in err
    assert ("applies" if len(argv) == 4 else "apply") in err
    assert not (tmp_path / "summary.json").exists()


def test_switch_options_under_auto_with_a_stored_fixed_share_are_set_aside(
    capsys, tmp_path
) -> None:
    registry = tmp_path / "registry.db"
    job = ["--runtime", "sim", "--workers", "2", "--epochs", "0.2", "--mnist1d-samples", "1000"]
    config = TrainConfig(runtime="sim", workers=2, epochs=0.2, mnist1d_samples=1000)
    with Registry(str(registry)) as store:
        stored = store.ensure_job(fingerprint(config), describe_job(config))
        store.record_decision(
            stored, fraction=0.5, tolerance=0.5, repeats=1, evidence={}, reason="a test"
        )
    argv = ["train", *job, "--schedule", "auto", "--switch-threshold", "0.3", "--no-progress"]
    code = main([*argv, "--registry", str(registry), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert (
        "--switch-threshold not used: the stored decision fixes the BSP share (bsp:0.5,asp)" in err
    )
