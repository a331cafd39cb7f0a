"""`--model` and `--dataset` naming the user's own code (`userpkg.models:Net`), and `--resume`
never importing a path it read from a run directory (docs/security.md).

A tiny package is written to tmp_path and put on sys.path: an MLP over 8 floats, and a
factory of train/val/test TensorDatasets of 2 classes. Runs are simulated (`--runtime sim`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from syncswitch.cli.train import add_parser, config_for_resume
from syncswitch.config import make_config
from syncswitch.errors import ConfigError
from syncswitch.registry.fingerprint import describe_job

MODEL = "userpkg.models:Net"
DATA = "userpkg.data:make_datasets"

MODELS_PY = """
import torch.nn as nn

STOP_AFTER = None  # forward passes before a KeyboardInterrupt, as Ctrl-C would


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        global STOP_AFTER
        if STOP_AFTER is not None:
            STOP_AFTER -= 1
            if STOP_AFTER < 0:
                raise KeyboardInterrupt
        return self.layers(x)


not_callable = 3


def needs_width(width):
    return nn.Linear(8, width)
"""

DATA_PY = """
import torch
from torch.utils.data import TensorDataset


def _split(samples, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 8, generator=generator)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def make_datasets():
    return {"train": _split(256, 0), "val": _split(64, 1), "test": _split(64, 2)}


def as_tuple():
    return _split(256, 0), _split(64, 1)


def a_list():
    return [1, 2, 3, 4]
"""


@pytest.fixture
def userpkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`userpkg` on sys.path (and out of sys.modules again afterwards)."""
    package = tmp_path / "code" / "userpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(MODELS_PY)
    (package / "data.py").write_text(DATA_PY)
    (package / "raises.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    yield package
    for name in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        del sys.modules[name]


def job(out: Path, *flags: str) -> list[str]:
    return [
        "train", "--runtime", "sim", "--workers", "2", "--epochs", "1", "--schedule",
        "bsp:0.5,asp", "--no-progress", "--out", str(out), *flags,
    ]  # fmt: skip


def test_a_job_of_your_own_code_trains_from_the_command_line(userpkg, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert main(job(run, "--model", MODEL, "--dataset", DATA)) == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert set(summary["validation"]) >= {"accuracy", "loss"}
    assert set(summary["test"]) >= {"accuracy", "loss"}
    saved = json.loads((run / "config.json").read_text())
    assert (saved["model"], saved["dataset"]) == (MODEL, DATA)  # the job's names, as given


def test_a_tuple_of_datasets_and_a_config_file_work_too(userpkg, tmp_path, capsys) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(f"model: {MODEL}\ndataset: userpkg.data:as_tuple\n")
    run = tmp_path / "run"
    assert main(job(run, "--config", str(config))) == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["validation"]


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--model", "nopkg.models:Net", "--dataset", DATA], "no module named 'nopkg'"),
        (["--model", "userpkg.models:Nett", "--dataset", DATA], "has no 'Nett'"),
        (["--model", "userpkg.models:not_callable", "--dataset", DATA], "not a callable"),
        (["--model", "userpkg.models:needs_width", "--dataset", DATA], "takes arguments (width)"),
        (["--model", "userpkg.raises:Net", "--dataset", DATA], "RuntimeError: broken on import"),
        (["--model", "userpkg.models.Net"], "named with a colon: userpkg.models:Net"),
        (["--model", "userpkg/models.py:Net"], "not an import path of the form MODULE:NAME"),
        (["--dataset", DATA], "name its model too"),
        (["--model", "cnn1d", "--dataset", DATA], "built in) cannot take"),
        (["--model", MODEL, "--dataset", "userpkg.data:a_list"], "returned a list of 4"),
        (["--model", MODEL, "--dataset", "userpkg.models:Net"], "returned a Net"),
    ],
)
def test_bad_import_paths_end_in_one_line(userpkg, tmp_path, capsys, flags, fragment) -> None:
    run = tmp_path / "run"
    code = main(job(run, *flags))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert fragment in err
    assert not run.exists()  # refused before a run directory is made


def test_search_says_it_trains_built_in_workloads_only(capsys) -> None:
    code = main(["search", "--runtime", "sim", "--model", MODEL, "--dataset", DATA])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "is your own code" in err


def resume_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def run_dir_naming(tmp_path: Path, model: str, dataset: str) -> Path:
    run_dir = tmp_path / "tampered"
    run_dir.mkdir()
    saved = {"workers": 2, "epochs": 1.0, "model": model, "dataset": dataset}
    (run_dir / "config.json").write_text(json.dumps(saved))
    return run_dir


def test_resume_never_imports_a_path_from_config_json(tmp_path, monkeypatch) -> None:
    # A module that would say it was imported: the run directory names it, the user does not.
    (tmp_path / "planted.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('IMPORTED').touch()\nNet = object\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run_dir = run_dir_naming(tmp_path, "planted:Net", "mnist1d")
    with pytest.raises(ConfigError, match="give --model again beside --resume"):
        config_for_resume(resume_args("--resume", str(run_dir)))
    with pytest.raises(ConfigError, match="is not the model it was started with"):
        config_for_resume(resume_args("--resume", str(run_dir), "--model", "other:Net"))
    # Named again, the same: the job resumes (its code is imported only when training starts).
    config = config_for_resume(resume_args("--resume", str(run_dir), "--model", "planted:Net"))
    assert config.model == "planted:Net"
    assert "planted" not in sys.modules and not (tmp_path / "IMPORTED").exists()


def test_a_built_in_model_is_still_fixed_on_resume(tmp_path) -> None:
    run_dir = run_dir_naming(tmp_path, "cnn1d", "mnist1d")
    with pytest.raises(ConfigError, match="drop --model"):
        config_for_resume(resume_args("--resume", str(run_dir), "--model", "cnn1d"))
    with pytest.raises(ConfigError, match="drop --dataset"):
        config_for_resume(resume_args("--resume", str(run_dir), "--dataset", DATA))


def test_an_interrupted_run_of_your_own_code_resumes_when_named_again(
    userpkg, tmp_path, capsys
) -> None:
    import userpkg.models

    run = tmp_path / "run"
    flags = ("--epochs", "4", "--batch-size", "16", "--checkpoint-every", "0.1")
    userpkg.models.STOP_AFTER = 50  # the checks, then about 40 of the 64 gradients
    assert main(job(run, "--model", MODEL, "--dataset", DATA, *flags)) == 130
    assert (run / "checkpoints").is_dir()
    userpkg.models.STOP_AFTER = None
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    assert "give --dataset and --model again beside --resume" in capsys.readouterr().err
    again = ["--model", MODEL, "--dataset", DATA]
    assert main(["train", "--resume", str(run), "--no-progress", *again]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["test"]
    assert summary["reliability"]["failures"][-1]["kind"] == "resumed"


def test_the_fingerprint_names_your_code_by_its_path() -> None:
    described = describe_job(make_config({"model": MODEL, "dataset": DATA}))
    assert (described["model"], described["dataset"]) == (MODEL, DATA)
    assert described["mnist1d_samples"] is None  # MNIST-1D's own setting is moot
