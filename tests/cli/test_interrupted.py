"""Ctrl-C: the line names the run directory and the exact command that resumes it; a resumed
run says from which checkpoint; Ctrl-C before any checkpoint (Ray still starting) leaves
nothing a rerun would refuse (issue 47). Real runs on the simulator; no Ray is started."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import syncswitch.runtime.ray.connect as ray_connect
from syncswitch.cli.main import main
from syncswitch.core.reliability.checkpoints import CheckpointStore
from syncswitch.rundir import read_summary
from syncswitch.runtime.run_dir_checks import refuse_used_run_dir

SMALL = ["--workers", "2", "--epochs", "1", "--mnist1d-samples", "400", "--no-progress"]


def _ctrl_c(*_args: Any, **_kwargs: Any) -> None:
    raise KeyboardInterrupt


def test_ctrl_c_while_ray_starts_leaves_a_directory_a_rerun_accepts(
    capfd: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    monkeypatch.setattr(ray_connect, "connect", _ctrl_c)
    assert main(["train", *SMALL, "--out", str(out)]) == 130
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "run the same command again" in err[0]
    refuse_used_run_dir(out)  # the rerun is accepted: no earlier run is left in it


def test_ctrl_c_names_the_directory_and_the_resume_command_that_continues_it(
    capfd: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    save = CheckpointStore.save

    def save_then_ctrl_c(self: CheckpointStore, *args: Any, **kwargs: Any) -> Any:
        info = save(self, *args, **kwargs)
        if info.samples > 0:
            raise KeyboardInterrupt
        return info

    monkeypatch.setattr(CheckpointStore, "save", save_then_ctrl_c)
    assert main(["train", "--runtime", "sim", *SMALL, "--out", str(out)]) == 130
    line = capfd.readouterr().err.strip().splitlines()[-1]
    said = re.search(
        r"in (\S+) \(its last checkpoint at ([\d,]+) samples\); continue it with: "
        r"(\S+) train --resume (\S+)$",
        line,
    )
    assert said is not None, line
    assert said.group(1) == str(out) and said.group(4) == str(out)
    samples = int(said.group(2).replace(",", ""))
    assert samples > 0

    monkeypatch.setattr(CheckpointStore, "save", save)
    assert main(["train", "--resume", str(out)]) == 0
    err = capfd.readouterr().err
    resumed = re.search(
        r"resuming (\S+) from (checkpoint-\d+\.pt) \((\w+)\), taken at "
        r"([\d.]+)% of the samples \(([\d,]+) of ([\d,]+)\)",
        err,
    )
    assert resumed is not None, err
    assert resumed.group(1) == str(out) and int(resumed.group(5).replace(",", "")) == samples
    total = int(resumed.group(6).replace(",", ""))
    assert float(resumed.group(4)) == pytest.approx(100 * samples / total, abs=0.05)
    assert read_summary(out).complete
