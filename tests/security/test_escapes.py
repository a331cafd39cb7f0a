"""Text read back from files or the registry reaches the terminal as text: every control
character (an escape sequence that clears the screen or sets the window title, a bidi
override) is shown escaped, in `report`, `jobs`, `jobs --show` and our error lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from syncswitch.terminal import printable

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs-0.1.0" / "bsp_0_25_asp"
CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"
HOSTILE = f"{CLEAR}x{TITLE}\u202eevil\x9b31m"


def _no_raw_controls(text: str) -> None:
    raw = [c for c in text if c in "\x1b\x07\x9b\u202e"]
    assert raw == [], text[-500:]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, é and 中", "plain text, é and 中"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
        ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
        ("\u202eabc\u2066", "\\u202eabc\\u2066"),
    ],
)
def test_printable_escapes_every_control_character(text, shown):
    assert printable(text) == shown


def test_report_shows_config_fields_and_directory_names_escaped(tmp_path, capfd):
    run = tmp_path / f"run{CLEAR}"
    shutil.copytree(FIXTURE, run)
    config = json.loads((run / "config.json").read_text())
    config.update(dataset=HOSTILE, model=HOSTILE)
    (run / "config.json").write_text(json.dumps(config))
    skipped = tmp_path / f"not-a-run{TITLE}"
    skipped.mkdir()
    assert main(["report", str(run), str(skipped)]) == 0
    out, err = capfd.readouterr()
    _no_raw_controls(out + err)
    assert "\\x1b[2J" in out + err and "\\x1b]0;owned\\x07" in err


def _registry_with_hostile_text(path: Path) -> str:
    from syncswitch.config import TrainConfig
    from syncswitch.registry import Registry, TrialRecord, describe_job, fingerprint

    config = TrainConfig(workers=2, epochs=1.0)
    description = {**describe_job(config), "model": HOSTILE, "note": HOSTILE}
    with Registry(path) as registry:
        job = registry.ensure_job(fingerprint(config), description)
        registry.record_trial(
            job, TrialRecord(0.5, 0, "bsp:0.5,asp", HOSTILE, 0.9, 10.0, HOSTILE, concurrent=1)
        )
        registry.record_decision(
            job, fraction=0.5, tolerance=0.5, repeats=1, evidence={}, reason=HOSTILE
        )
    return fingerprint(config)


def test_jobs_and_jobs_show_print_registry_text_escaped(tmp_path, capfd):
    path = tmp_path / "registry.db"
    job_fp = _registry_with_hostile_text(path)
    assert main(["jobs", "--registry", str(path)]) == 0
    assert main(["jobs", "--registry", str(path), "--show", job_fp[:8]]) == 0
    out, err = capfd.readouterr()
    _no_raw_controls(out + err)
    assert out.count("\\x1b[2J") >= 3  # the model, and on --show the note and the reason


def test_an_error_line_quoting_a_file_escapes_its_control_characters(tmp_path, capfd):
    config = tmp_path / "job.yaml"
    config.write_text(f'schedule: "{CLEAR}bsp"\n'.replace("\x1b", "\\e"))
    assert main(["train", "--config", str(config), "--no-progress"]) == 2
    err = capfd.readouterr().err
    _no_raw_controls(err)
    assert len(err.strip().splitlines()) == 1


def test_one_line_escapes_what_an_error_message_quotes():
    from syncswitch.cli.main import one_line

    assert one_line(f"bad value {CLEAR}\nnext") == "bad value \\x1b[2J\\x1b[H next"
