"""Issue 24 case 6: files the project reads back, and paths it writes to.

Output paths (`--plot`, `--html`, `calibrate -o`) that are a directory, under a file, or a
device are one line, and a written file is replaced atomically; names with rich or
matplotlib markup are printed and drawn as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from tests.security.helpers import one_line_error
from tests.security.test_hangs import big_run_dir


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return big_run_dir(tmp_path, "run-[bold]-$x$", switches=2, marks=2, workers=2)


@pytest.mark.parametrize("flag", ["--plot", "--html"])
@pytest.mark.parametrize("kind", ["directory", "under-a-file", "device"])
def test_a_report_output_that_cannot_be_a_file_is_one_line(tmp_path, run_dir, capsys, flag, kind):
    suffix = ".png" if flag == "--plot" else ".html"
    if kind == "directory":
        target = tmp_path / f"out{suffix}"
        target.mkdir()
    elif kind == "under-a-file":
        (tmp_path / "file").write_text("x")
        target = tmp_path / "file" / f"out{suffix}"
    else:
        target = Path("/dev/null")
        if flag == "--plot":  # no device has a .png name: a link to one is replaced instead
            link = tmp_path / "out.png"
            link.symlink_to("/dev/null")
            assert main(["report", str(run_dir), flag, str(link)]) == 0
            assert Path("/dev/null").is_char_device() and not link.is_symlink()
            assert link.read_bytes()[:4] == b"\x89PNG"
            return
    err = one_line_error(capsys, ["report", str(run_dir), flag, str(target)])
    assert flag in err
    if kind == "device":
        assert Path("/dev/null").is_char_device()


def test_calibrate_output_that_is_a_directory_is_one_line(tmp_path, capsys):
    target = tmp_path / "cluster.yaml"
    target.mkdir()
    err = one_line_error(capsys, ["calibrate", str(tmp_path), "-o", str(target)])
    assert "--output" in err and "directory" in err


def test_markup_in_names_is_printed_and_drawn_as_it_is(tmp_path, run_dir, capsys):
    plot = tmp_path / "report.png"
    assert (
        main(["report", str(run_dir), "--plot", str(plot), "--html", str(tmp_path / "r.html")]) == 0
    )
    out = capsys.readouterr().out
    assert "[bold]" in out and "[/]" in out and plot.read_bytes()[:4] == b"\x89PNG"
    assert "$\\frac{" in json.loads((run_dir / "summary.json").read_text())["schedule"]


def test_a_worker_past_its_restart_limit_ends_in_the_one_line_stop(monkeypatch, capsys):
    import syncswitch.cli.train as train_cli
    from syncswitch.control.decisions import Stop
    from syncswitch.control.dispatch import raise_stop

    reason = "worker 1 failed 4 times (max_worker_restarts = 3); last: died (killed)"

    def stopped_run(args):
        raise_stop(Stop(reason))

    monkeypatch.setattr(train_cli, "run", stopped_run)
    assert main(["train", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("syncswitch: stopped: worker 1 failed 4 times")
