"""The third round's last tracebacks, each now one line (exit 2) or a plain success: names
longer than a file system allows, a YAML date where text belongs, numbers no run writes,
math text in a file, and registry values this code did not write."""

from __future__ import annotations

import contextlib
import csv
import shutil
import sqlite3
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from tests.security.helpers import one_line_error

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs-0.1.0"
LONG = "n" * 300  # one name longer than the 255 bytes a file system allows
SIM = ["--runtime", "sim", "--workers", "2", "--epochs", "1", "--mnist1d-samples", "400"]


def _nothing_made(root: Path, before: set[str]) -> None:
    assert {p.name for p in root.iterdir()} == before


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs"],
        ["jobs", "--show", "ab"],
        ["train", *SIM, "--schedule", "auto", "--no-progress"],
        ["search", *SIM],
    ],
    ids=["jobs", "jobs-show", "schedule-auto", "search"],
)
def test_a_registry_path_with_a_too_long_name_is_one_line(tmp_path, capsys, argv, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = {p.name for p in tmp_path.iterdir()}
    registry = tmp_path / LONG / "registry.db"
    err = one_line_error(capsys, [*argv, "--registry", str(registry)])
    assert "a part of the path is 300 bytes long" in err and "registry" in err
    _nothing_made(tmp_path, before)


def test_an_online_run_with_a_too_long_registry_name_completes_and_says_so(
    tmp_path, capfd, monkeypatch
):
    # A short run's share ends at its ceiling and is not stored at all: store it anyway here.
    monkeypatch.setattr("syncswitch.recurring.online.unworthy_share", lambda summary: None)
    out = tmp_path / "run"
    job = ["--runtime", "sim", "--workers", "4", "--epochs", "2", "--mnist1d-samples", "1000"]
    argv = ["train", *job, "--no-progress", "--out", str(out)]  # it leaves BSP online
    assert main([*argv, "--registry", str(tmp_path / LONG / "r.db")]) == 0
    err = capfd.readouterr().err
    assert "the online decision was not stored" in err and "Traceback" not in err


def test_an_out_name_too_long_is_one_line_and_makes_nothing(tmp_path, capsys):
    err = one_line_error(capsys, ["train", *SIM, "--no-progress", "--out", str(tmp_path / LONG)])
    assert "--out" in err and "300 bytes" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "notes", ["{2024-01-01: a}", "{a: 2024-01-01}", "{a: [1, 2]}", "{a: {b: c}}"]
)
def test_a_cluster_file_with_a_date_in_its_notes_is_one_line_and_makes_no_run_dir(
    tmp_path, capsys, notes
):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"notes: {notes}\n")
    out = tmp_path / "run"
    argv = ["train", *SIM, "--cluster", str(cluster), "--no-progress", "--out", str(out)]
    err = one_line_error(capsys, argv)
    assert "notes must map text to text or a number" in err
    assert not out.exists()


def _online_copy(tmp_path: Path) -> Path:
    run = tmp_path / "online"
    shutil.copytree(FIXTURES / "online", run)
    return run


def _set_column(path: Path, column: str, value: str, rows: slice = slice(1, None)) -> None:
    with path.open(newline="") as handle:
        table = list(csv.reader(handle))
    index = table[0].index(column)
    for row in table[rows]:
        row[index] = value
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(table)


def test_report_plot_with_a_staleness_no_run_has_is_one_line(tmp_path, capsys):
    run = _online_copy(tmp_path)
    _set_column(run / "updates.csv", "staleness", str(10**30), slice(5, 6))
    plot = tmp_path / "report.png"
    # The dashboard reads updates.csv (the paper-style default does not).
    argv = ["report", str(run), "--plot", str(plot), "--plot-style", "dashboard"]
    err = one_line_error(capsys, argv)
    assert "staleness" in err and "out of range" in err
    assert not plot.exists()


def test_report_plot_draws_math_text_from_a_file_as_text(tmp_path, capsys):
    run = _online_copy(tmp_path)
    _set_column(run / "timing_signals.csv", "rule", "$x^{$")
    plot = tmp_path / "report.png"
    assert main(["report", str(run), "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 0 and "Traceback" not in capsys.readouterr().err


def _registry(tmp_path: Path) -> Path:
    from syncswitch.config import TrainConfig
    from syncswitch.registry import Registry, describe_job, fingerprint

    path = tmp_path / "registry.db"
    config = TrainConfig(workers=2, epochs=1.0)
    with Registry(path) as registry:
        job = registry.ensure_job(fingerprint(config), describe_job(config))
        registry.record_decision(
            job, fraction=0.5, tolerance=0.5, repeats=1, evidence={}, reason="ok"
        )
    return path


def _sql(path: Path, statement: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE jobs SET description = json_set(description, '$.lr', 'fast', "
        "'$.epochs', 'many', '$.step_time_ms', 'slow', '$.jitter_sigma', 'x')",
        "UPDATE jobs SET description = json_set(description, '$.runtime', 'sim', "
        "'$.cluster', json('{\"compute\": \"none\"}'))",
        "UPDATE jobs SET created = 5",
        "UPDATE decisions SET created = 'yesterday'",
    ],
    ids=["strings", "odd-cluster", "number-job-created", "text-decision-created"],
)
def test_jobs_shows_registry_values_it_did_not_write(tmp_path, capsys, statement):
    path = _registry(tmp_path)
    _sql(path, statement)
    codes = [main(["jobs", "--registry", str(path), *show]) for show in ([], ["--show", ""])]
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if codes == [0, 0]:  # shown as they are
        assert "decision #1" in captured.out
    else:  # or refused in one line each (a time SQLite cannot give back as one)
        assert codes == [2, 2] and len(captured.err.strip().splitlines()) == 2, captured.err


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("job.yaml", "workers: 2\nepochs: 1\nworkers: 4\n"),
        ("job.yaml", "{workers: 2, workers: 4}\n"),
        ("cluster.yaml", "compute: {step_time_ms: 1}\ncompute: {step_time_ms: 2}\n"),
        ("cluster.yaml", "compute: {step_time_ms: 1, step_time_ms: 2}\n"),
    ],
)
def test_a_yaml_key_given_twice_is_one_line(tmp_path, capsys, name, text):
    path = tmp_path / name
    path.write_text(text)
    flag = "--config" if name == "job.yaml" else "--cluster"
    out = tmp_path / "run"
    argv = ["train", *SIM, flag, str(path), "--no-progress", "--out", str(out)]
    err = one_line_error(capsys, argv)
    assert "is given twice" in err and not out.exists()
