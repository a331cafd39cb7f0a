"""Reading a run directory back through syncswitch.rundir (a scripted run: no Ray)."""

from __future__ import annotations

import json

import pytest

from syncswitch.cli.main import main
from syncswitch.errors import RunDirError
from syncswitch.rundir import load_run, names, read_config, read_events, read_summary
from tests.control.scripted import ScriptedRun


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run")
    ScriptedRun(directory, schedule="bsp:0.5,asp").run()
    # The scripted workers report only a mean step time; the report then reads updates.csv.
    (directory / names.WORKER_STEPS).unlink()
    return directory


def test_load_run_gives_the_typed_summary_and_the_files_records(run_dir) -> None:
    run = load_run(run_dir)
    assert run.summary == read_summary(run_dir) and run.complete
    assert run.config == read_config(run_dir) and run.workers == 4
    assert [(s.from_protocol, s.to_protocol) for s in run.switches] == [("bsp", "asp")]
    assert run.switches == list(run.summary.switches)  # events.jsonl and summary.json agree
    assert len(run.metrics) == 4 and run.metrics.fraction[-1] == 1.0
    assert run.timing == "real" and run.runtime == "ray"
    assert sum(run.staleness_counts["bsp"].values()) > 0


def test_events_are_read_in_order(run_dir) -> None:
    kinds = [e["event"] for e in read_events(run_dir)]
    assert "switch" in kinds and kinds.index("switch") > 0


def test_a_killed_run_without_a_summary_is_described_as_far_as_it_got(run_dir, tmp_path):
    killed = tmp_path / "killed"
    killed.mkdir()
    for name in (names.CONFIG, names.METRICS, names.EVENTS):
        (killed / name).write_bytes((run_dir / name).read_bytes())
    with (killed / names.EVENTS).open("a") as handle:
        handle.write('{"event": "switch", "at_fr')  # torn by the kill
    run = load_run(killed)
    assert run.summary is None and run.status == "no summary"
    assert run.switches and any("torn" in note for note in run.notes)


def test_a_switch_event_that_is_malformed_is_one_line(run_dir, tmp_path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / names.CONFIG).write_bytes((run_dir / names.CONFIG).read_bytes())
    event = {"event": "switch", "at_fraction": 0.5, "at_samples": "many", "from": "bsp"}
    (broken / names.EVENTS).write_text(json.dumps(event) + "\n")
    with pytest.raises(RunDirError, match="a switch record is malformed"):
        load_run(broken)


def test_the_report_command_reads_the_run(run_dir, capsys) -> None:
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "bsp:0.5,asp" in out and "complete" in out
