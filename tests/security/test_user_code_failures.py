"""The user's code raising (a factory at the start, a Dataset mid-run, on the simulator and
on Ray) ends in one line with the exception's escapes escaped, never a traceback, and leaves
a directory that a rerun or `--resume` accepts (docs/security.md, "Printing ...")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from tests.security import user_failures
from tests.security.helpers import one_line_error

CODE = "tests.security.user_failures"


def job(out: Path, *flags: str, runtime: str = "sim") -> list[str]:
    return [
        "train", "--runtime", runtime, "--workers", "2", "--epochs", "1", "--batch-size",
        "16", "--schedule", "bsp:0.5,asp", "--no-progress", "--out", str(out),
        "--model", f"{CODE}:Net", *flags,
    ]  # fmt: skip


@pytest.fixture
def broken() -> dict:
    yield user_failures.BROKEN
    user_failures.BROKEN.update(model=False, samples=False)


def stopped(capsys, argv: list[str]) -> str:
    """Exit 1 and one line on stderr, its escapes escaped."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 1, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "\x1b" not in err and "\\x1b[31m" in err
    return err


def test_a_model_factory_that_raises_is_one_line_and_the_out_is_reusable(
    broken, tmp_path, capsys
) -> None:
    broken["model"] = True
    out = tmp_path / "run"
    err = one_line_error(capsys, job(out, "--dataset", f"{CODE}:data"))
    assert "model_factory= raised RuntimeError: \\x1b[31mboom in the factory (at " in err
    assert "\x1b" not in err and "user_failures.py:" in err
    broken["model"] = False
    assert main(job(out, "--dataset", f"{CODE}:data")) == 0  # a rerun into the same --out


def test_a_dataset_factory_that_raises_is_one_line(tmp_path, capsys) -> None:
    err = one_line_error(capsys, job(tmp_path / "run", "--dataset", f"{CODE}:broken_data"))
    assert "raised OSError: \\x1b[31mcannot read the data (at " in err and "\x1b" not in err


def test_a_dataset_that_raises_mid_run_stops_in_one_line_and_resumes(
    broken, tmp_path, capfd
) -> None:
    capsys = capfd  # the resume's notice goes to the terminal itself
    broken["samples"] = True
    out = tmp_path / "run"
    err = stopped(capsys, job(out, "--dataset", f"{CODE}:data"))
    assert "your code raised ValueError: \\x1b[31mbad sample" in err
    assert json.loads((out / "summary.json").read_text())["status"].startswith("failed")
    broken["samples"] = False
    resume = ["train", "--resume", str(out), "--no-progress", "--model", f"{CODE}:Net"]
    assert main([*resume, "--dataset", f"{CODE}:data"]) == 0
    assert "holds no checkpoint; the run starts over" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"
    assert main(["report", str(out)]) == 0


@pytest.mark.ray
def test_a_dataset_that_raises_on_ray_workers_is_one_escaped_line(
    ray_session, tmp_path, capsys
) -> None:
    err = stopped(
        capsys, job(tmp_path / "run", "--dataset", f"{CODE}:broken_on_workers", runtime="ray")
    )
    assert "ValueError: \\x1b[31mbad sample" in err


@pytest.mark.ray
def test_an_unpicklable_factory_on_ray_is_one_line_before_anything_starts(
    ray_session, tmp_path
) -> None:
    import threading

    import torch

    from syncswitch.config import TrainConfig
    from syncswitch.errors import ConfigError
    from syncswitch.runtime.train import train

    lock = threading.Lock()

    def holds_a_lock() -> torch.nn.Module:
        with lock:
            return torch.nn.Linear(8, 2)

    data = user_failures.data()
    out = tmp_path / "run"
    config = TrainConfig(runtime="ray", workers=2, epochs=1.0, progress=False, out=str(out))
    with pytest.raises(ConfigError, match="model_factory= cannot be sent to Ray's actors") as e:
        train(config, model_factory=holds_a_lock, train_data=data["train"], val_data=data["val"])
    assert "lock" in str(e.value) and len(str(e.value).splitlines()) == 1
    assert not out.exists()
