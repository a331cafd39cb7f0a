"""summary.json as a typed record: the written form, the round trip, and hostile files."""

from __future__ import annotations

import io
import json
import math
from dataclasses import fields

import pytest
from rich.console import Console

from syncswitch.core.sync.records import DropRecord, UpdateRecord
from syncswitch.errors import RunDirError
from syncswitch.records.metric import DEFAULT, LEGACY, MetricSpec
from syncswitch.run_summary import summary_json, summary_table
from syncswitch.rundir import (
    DROP_COLUMNS,
    SUMMARY_KEYS,
    UPDATE_COLUMNS,
    Summary,
    names,
    read_summary,
)
from tests.control.scripted import ScriptedRun
from tests.rundir.samples import sample_summary
from tests.security.helpers import one_line_error


def write_summary(run_dir, data: object) -> None:
    run_dir.mkdir(exist_ok=True)
    (run_dir / names.CONFIG).write_text("{}")
    (run_dir / names.SUMMARY).write_text(json.dumps(data))


def test_to_json_and_from_json_round_trip() -> None:
    summary = sample_summary()
    record = summary.to_plain()
    assert tuple(record) == SUMMARY_KEYS  # the file's keys, in the file's order
    assert Summary.from_plain(json.loads(json.dumps(record))) == summary


def test_a_diverged_run_keeps_its_non_finite_loss() -> None:
    summary = sample_summary(validation={"accuracy": 0.1, "loss": math.inf}, final_value=0.1)
    again = Summary.from_plain(json.loads(json.dumps(summary.to_plain())))
    assert again.validation == {"accuracy": 0.1, "loss": math.inf} and again.final_value == 0.1


def test_a_summary_from_before_validation_splits_reads_as_judged_on_test() -> None:
    old = sample_summary().to_plain()
    for key in ("metric", "final_value", "best_value", "validation", "test"):
        del old[key]
    old.update(final_accuracy=0.8, best_accuracy=0.85, final_test_loss=0.5)
    summary = Summary.from_plain(old)
    assert summary.metric == LEGACY and summary.metric.split == "test"
    assert (summary.final_value, summary.best_value) == (0.8, 0.85)
    assert summary.validation is None and summary.test == {"accuracy": 0.8, "loss": 0.5}


def test_the_best_value_follows_the_metric_direction() -> None:
    lower = MetricSpec("mse", higher_is_better=False)
    assert lower.best([0.5, 0.2, 0.3]) == 0.2 and DEFAULT.best([0.5, 0.2, 0.3]) == 0.5
    assert DEFAULT.best([math.nan, 0.4]) == 0.4 and lower.best([]) is None


def test_a_run_writes_its_summary_as_the_record_serialises_it(tmp_path) -> None:
    run = ScriptedRun(tmp_path, schedule="bsp:0.5,asp").run()
    written = json.loads((tmp_path / names.SUMMARY).read_text())
    assert written == run.summary.to_plain() and tuple(written) == SUMMARY_KEYS
    read = read_summary(tmp_path)
    assert read == run.summary
    assert read.complete and read.switches[0].to_protocol == "asp"
    assert read.gradients.sent == read.gradients.applied + read.gradients.dropped_total


def test_item_access_still_gives_the_json_values() -> None:
    summary = sample_summary()
    assert summary["final_value"] == summary.final_value
    assert summary["switches"][0]["to"] == "asp"  # as the file has it
    assert summary["gradients"]["dropped"] == {"stale": 1}
    with pytest.raises(KeyError):
        summary["no_such_key"]


def test_the_short_json_takes_its_keys_from_the_schema(tmp_path) -> None:
    printed = json.loads(summary_json(sample_summary(), tmp_path))
    assert list(printed) == [
        "status",
        "metric",
        "final_value",
        "best_value",
        "wall_time_s",
        "samples_per_s",
        "switches",
        "run_dir",
    ]
    assert printed["run_dir"] == str(tmp_path)


@pytest.mark.parametrize(("runtime", "label"), [("sim", "PyTorch log"), ("ray", "Ray/PyTorch log")])
def test_the_terminal_table_names_the_libraries_log_by_the_runtime(
    tmp_path, runtime, label
) -> None:
    summary = sample_summary(runtime=runtime)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(summary_table(summary, tmp_path, library_log=tmp_path / "ray.log"))
    lines = console.export_text().splitlines()
    assert any(line.strip().startswith(label) for line in lines)
    assert (runtime == "sim") != any("Ray/PyTorch" in line for line in lines)


def test_the_terminal_table_says_where_the_best_was_and_why_the_run_stopped(tmp_path) -> None:
    summary = sample_summary(stopped_early="early stopping: accuracy has not improved")
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(summary_table(summary, tmp_path, library_log=None))
    text = console.export_text()
    assert "92.00% best at 80% (best_weights.pt)" in text
    assert any(
        line.split()
        == ["stopped", "early", "early", "stopping:", "accuracy", "has", "not", "improved"]
        for line in text.splitlines()
    )


def test_a_summary_written_before_the_later_keys_existed_still_reads(tmp_path) -> None:
    # The first version's keys only: no runtime, host time, schedule source, cluster,
    # online, reliability or placement; a switch without its version; no unaccounted count.
    old = {
        key: value
        for key, value in sample_summary().to_plain().items()
        if key
        not in (
            "runtime",
            "host_time_s",
            "schedule_source",
            "samples_by_protocol",
            "cluster",
            "online",
            "reliability",
            "placement",
            "best",
            "test_weights",
            "stopped_early",
        )
    }
    del old["switches"][0]["version"]
    del old["gradients"]["unaccounted"]
    write_summary(tmp_path, old)
    summary = read_summary(tmp_path)
    assert summary.runtime == "ray" and summary.reliability is None
    assert summary.switches[0].version is None and summary.gradients.unaccounted is None
    assert summary.final_value == 0.91


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda s: s.update(final_value="high"), 'final_value = "high" is not allowed'),
        (lambda s: s.update(metric={**s["metric"], "name": "x y"}), "metric: name"),
        (lambda s: s.update(metric={"name": "acc", "higher_is_better": 1}), "higher_is_better"),
        (lambda s: s.update(validation={"accuracy": "x"}), "validation"),
        (lambda s: s.update(samples=True), "samples = true"),
        (lambda s: s.update(wall_time_s=float("inf")), "wall_time_s = inf"),
        (lambda s: s.pop("samples"), "'samples' is missing; it must be an integer >= 0"),
        (lambda s: s.update(runtime="k8s"), "one of ray, sim"),
        (lambda s: s.update(switches=[{"at_fraction": "x"}]), "switches[0]: at_fraction"),
        (lambda s: s["gradients"].update(sent=-1), "gradients: sent = -1"),
        (lambda s: s["reliability"].update(failures="none"), "reliability: failures"),
        (lambda s: s.update(time_by_protocol={"bsp": float("nan")}), "time_by_protocol"),
        (lambda s: s["best"].update(fraction="x"), "best: fraction"),
        (lambda s: s["best"].pop("samples"), "best: 'samples' is missing"),
        (lambda s: s.update(stopped_early=3), "stopped_early"),
    ],
)
def test_a_hostile_summary_is_refused_in_one_line(tmp_path, change, fragment) -> None:
    data = sample_summary().to_plain()
    change(data)
    write_summary(tmp_path, data)
    with pytest.raises(RunDirError) as refused:
        read_summary(tmp_path)
    message = str(refused.value)
    assert fragment in message and len(message.splitlines()) == 1
    assert str(tmp_path) in message and names.SUMMARY in message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(b"[1, 2]", "must hold a JSON object"), (b"{", "not valid JSON"), (b"\xff\xfe", "UTF-8")],
)
def test_a_summary_that_is_no_json_object_is_one_line(tmp_path, content, fragment) -> None:
    write_summary(tmp_path, {})
    (tmp_path / names.SUMMARY).write_bytes(content)
    with pytest.raises(RunDirError, match=fragment):
        read_summary(tmp_path)


def test_a_summary_that_is_a_symlink_is_not_followed(tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(sample_summary().to_plain()))
    run_dir = tmp_path / "run"
    write_summary(run_dir, {})
    (run_dir / names.SUMMARY).unlink()
    (run_dir / names.SUMMARY).symlink_to(elsewhere)
    with pytest.raises(RunDirError, match="symbolic link"):
        read_summary(run_dir)


def test_the_report_command_refuses_a_hostile_summary_in_one_line(tmp_path, capsys) -> None:
    data = sample_summary().to_plain()
    data["best_value"] = "nan"
    write_summary(tmp_path, data)
    error = one_line_error(capsys, ["report", str(tmp_path)])
    assert 'summary.json: best_value = "nan" is not allowed' in error


def test_the_csv_columns_are_the_records_fields() -> None:
    assert (*(f.name for f in fields(UpdateRecord)), "emulated", "simulated") == UPDATE_COLUMNS
    assert tuple(f.name for f in fields(DropRecord)) == DROP_COLUMNS
