"""No command imports code that a run directory (or a registry) names: an import path read
from an untrusted file is never resolved (docs/security.md, "Nothing read from an untrusted
file chooses ... what code runs"). Each test plants a module whose import writes a marker
file, names it in what the command reads, and finds no marker afterwards.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.runtime.train import train
from tests.security.helpers import make_run_dir, one_line_error, valid_state

PLANTED = "planted:Net"
PLANTED_PY = """
import pathlib
pathlib.Path(__file__).with_name('IMPORTED').touch()


def Net():
    from syncswitch.workloads import build_model, load_dataset

    return build_model("cnn1d", load_dataset("mnist1d", mnist1d_samples=400))
"""
JOB = dict(
    runtime="sim", workers=2, epochs=20.0, mnist1d_samples=400, batch_size=16,
    schedule="bsp:0.5,asp", eval_every=0.5, progress=False,
)  # fmt: skip


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """planted.py in the current directory and on sys.path; its import creates IMPORTED."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "planted.py").write_text(PLANTED_PY)
    monkeypatch.chdir(code)
    monkeypatch.syspath_prepend(str(code))
    yield code / "IMPORTED"
    sys.modules.pop("planted", None)


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """`calibrate` says what it fits, then ends in one error line (exit 2, no traceback)."""
    if argv[0] != "calibrate":
        return one_line_error(capsys, argv)
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("syncswitch: fitting"), err
    assert lines[1].startswith("syncswitch: error: "), err
    return lines[1]


def assert_not_imported(marker: Path) -> None:
    assert not marker.exists() and "planted" not in sys.modules


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("no-code") / "run"
    train(TrainConfig(**JOB, out=str(out)))
    return out


def as_ray_run(sim_run: Path, run: Path, **config: object) -> Path:
    """The simulated run's records as a complete Ray run's, config.json changed by `config`."""
    run.mkdir(parents=True)
    for path in sim_run.iterdir():
        if path.is_file():
            (run / path.name).write_bytes(path.read_bytes())
    for name, changes in (("config.json", config), ("summary.json", {})):
        data = json.loads((run / name).read_text())
        data.update(runtime="ray", **changes)
        (run / name).write_text(json.dumps(data))
    return run


def test_calibrate_never_imports_a_model_a_later_run_directory_names(
    sim_run, planted, tmp_path, capsys
) -> None:
    # The acceptance test of issue 46: `calibrate DIR1 DIR2`, DIR2's config.json naming code.
    first = as_ray_run(sim_run, tmp_path / "dir1")
    second = as_ray_run(sim_run, tmp_path / "dir2", model=PLANTED)
    out = str(tmp_path / "c.yaml")
    err = refused(capsys, ["calibrate", str(first), str(second), "-o", out])
    assert 'names code to import (--model "planted:Net")' in err and "give --model" in err
    assert_not_imported(planted)
    err = refused(capsys, ["calibrate", str(first), str(second), "-o", out, "--model", "o:Net"])
    assert '--model "o:Net" is not the model it trained' in err
    assert_not_imported(planted)
    assert not Path(out).exists()


def test_calibrate_refuses_a_dataset_by_import_path_and_a_needless_model(
    sim_run, planted, tmp_path, capsys
) -> None:
    run = as_ray_run(sim_run, tmp_path / "d", dataset="planted:make", model=PLANTED)
    out = str(tmp_path / "c.yaml")
    err = refused(capsys, ["calibrate", str(run), "-o", out, "--model", PLANTED])
    assert "names a dataset by import path" in err
    built_in = as_ray_run(sim_run, tmp_path / "b")
    err = refused(capsys, ["calibrate", str(built_in), "-o", out, "--model", PLANTED])
    assert "every run given trained a built-in model; drop --model" in err
    assert_not_imported(planted)


def test_calibrate_uses_the_model_the_command_line_names_again(
    sim_run, planted, tmp_path, capsys
) -> None:
    run = as_ray_run(sim_run, tmp_path / "own", model=PLANTED)
    out = tmp_path / "c.yaml"
    argv = ["calibrate", str(run), "-o", str(out), "--model", PLANTED, "--no-refine", "--force"]
    assert main(argv) == 0, capsys.readouterr().err
    assert planted.exists() and out.is_file()  # the user's own choice, from the command line


def test_report_never_imports_what_config_json_names(sim_run, planted, tmp_path, capsys) -> None:
    run = as_ray_run(sim_run, tmp_path / "r", model=PLANTED, dataset="planted:make")
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    assert_not_imported(planted)


def test_resume_never_imports_what_config_json_names(planted, tmp_path, capsys) -> None:
    job = {"workers": 2, "epochs": 1.0, "mnist1d_samples": 200, "batch_size": 8}
    run = make_run_dir(tmp_path, [valid_state()], config={**job, "model": PLANTED})
    err = one_line_error(capsys, ["train", "--resume", str(run), "--no-progress"])
    assert "give --model again beside --resume" in err
    assert_not_imported(planted)


def test_jobs_never_imports_what_a_registry_names(planted, tmp_path, capsys) -> None:
    from syncswitch.registry import Registry, describe_job, fingerprint

    config = TrainConfig(workers=2, epochs=1.0)
    path = tmp_path / "registry.db"
    with Registry(path) as registry:
        registry.ensure_job(fingerprint(config), {**describe_job(config), "model": PLANTED})
    assert main(["jobs", "--registry", str(path)]) == 0
    assert main(["jobs", "--registry", str(path), "--show", fingerprint(config)[:8]]) == 0
    assert "planted:Net" in capsys.readouterr().out
    assert_not_imported(planted)
