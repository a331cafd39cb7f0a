"""`syncswitch train` on a machine without CUDA: device and GPU requests it cannot meet are
refused in one line before Ray, a run directory or any actor starts."""

from pathlib import Path

import pytest
import torch

from syncswitch.cli.main import main

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--device", "cuda"], "--device cuda: this machine"),
        (["--server-device", "cuda"], "--server-device cuda: this machine"),
        (["--gpus-per-worker", "0.5"], "gpus_per_worker = 0.5 asks for GPUs, but this machine"),
        (["--placement", "strict-spread", "--workers", "2"], "strict-spread puts each of"),
    ],
)
def test_what_this_machine_cannot_run_is_refused_before_anything_starts(
    capsys, tmp_path: Path, argv, fragment
) -> None:
    import ray

    ray_before = ray.is_initialized()  # another test's session may hold one
    out = tmp_path / "run"
    assert main(["train", *argv, "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert fragment in err
    assert not out.exists()
    assert ray.is_initialized() == ray_before  # the refusal started no Ray
