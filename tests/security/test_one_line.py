"""Bad input ends in one line naming the value and what is allowed, never a traceback; files
are read only when regular; secrets are never printed; user text is printed as it is."""

import os
import sqlite3
from pathlib import Path

import pytest

from syncswitch.files import write_atomic
from syncswitch.registry import Registry
from tests.security.helpers import one_line_error

FP = "3fa9c2" + "0" * 58


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_bytes(b"workers: 4\nschedule: \xff\xfe bsp\n")
    err = one_line_error(capsys, ["train", "--config", str(job)])
    assert "is not UTF-8 text" in err and str(job) in err


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_config_file_that_is_not_a_regular_file_is_refused_without_reading(
    tmp_path, capsys, kind
):
    if kind == "fifo":
        path = tmp_path / "job.yaml"
        os.mkfifo(path)  # opening it to read would wait for a writer forever
    elif kind == "device":
        path = tmp_path / "zero.yaml"
        path.symlink_to("/dev/zero")  # never ends
    else:
        path = tmp_path / "dir.yaml"
        path.mkdir()
    err = one_line_error(capsys, ["train", "--config", str(path)])
    assert "not a regular file" in err


def test_an_oversized_config_file_is_refused(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("# " + "x" * (2 << 20) + "\nworkers: 2\n")
    assert "larger than the 1 MiB allowed" in one_line_error(
        capsys, ["train", "--config", str(job)]
    )


def test_yaml_tags_that_build_objects_run_nothing(tmp_path, capsys):
    canary = tmp_path / "canary"
    job = tmp_path / "job.yaml"
    job.write_text(f'schedule: !!python/object/apply:os.system ["touch {canary}"]\n')
    assert "cannot be parsed" in one_line_error(capsys, ["train", "--config", str(job)])
    assert not canary.exists()


def test_a_registry_schema_version_that_is_not_a_number_is_one_line(tmp_path, capsys):
    path = tmp_path / "r.db"
    Registry(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE registry_meta SET value = 'two' WHERE key = 'schema_version'")
    err = one_line_error(capsys, ["jobs", "--registry", str(path)])
    assert "schema version 'two'" in err and "not a version number" in err


def test_search_resolution_too_large_for_a_float_is_one_line(capsys):
    err = one_line_error(capsys, ["search", "--resolution", "1e400"])
    assert "resolution = '1e400' is not allowed; it must be a fraction" in err


def test_rich_markup_in_a_registry_path_is_printed_as_it_is(tmp_path, capsys):
    folder = tmp_path / "team["  # with the file name below, the path holds "[/]"
    folder.mkdir()
    path = folder / "]reg.db"
    with Registry(path) as registry:
        job = registry.ensure_job(FP, {"model": "[bold]cnn1d", "dataset": "mnist1d"})
        from syncswitch.registry import TrialRecord

        registry.record_trial(
            job, TrialRecord(0.5, 0, "bsp:0.5,asp", "complete", 0.9, 1.0, "runs/[/]x :smile:")
        )
    from syncswitch.cli.main import main

    assert main(["jobs", "--registry", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"registry: {path}" in out and "[bold]cnn1d" in out
    assert main(["jobs", "--registry", str(path), "--show", FP[:8]]) == 0
    out = capsys.readouterr().out
    assert "runs/[/]x :smile:" in out and "model: [bold]cnn1d" in out


def test_like_wildcards_in_jobs_show_match_nothing(tmp_path, capsys):
    path = tmp_path / "r.db"
    with Registry(path) as registry:
        registry.ensure_job(FP, {"model": "cnn1d"})
        assert registry.find_jobs("%") == [] and registry.find_jobs("_") == []
        assert [j.fingerprint for j in registry.find_jobs(FP[:4])] == [FP]
    err = one_line_error(capsys, ["jobs", "--registry", str(path), "--show", "%"])
    assert "--show '%' is not allowed" in err and "hex digits" in err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://bob:s3cretpw@db.example:notaport/jobs",  # unparseable: port
        "nosuchdialect://bob:s3cretpw@db.example/jobs",  # parseable, no driver
    ],
)
def test_a_registry_url_password_is_never_printed(capsys, url):
    err = one_line_error(capsys, ["jobs", "--registry", url])
    assert "s3cretpw" not in err and "bob" in err


def test_atomic_writes_never_follow_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "summary.json"
    target.symlink_to(victim)
    # Every name a predictable writer might use, planted as a link to the victim.
    for name in (".write-summary.json.tmp", "summary.json.tmp", ".summary.json.tmp"):
        (tmp_path / name).symlink_to(victim)
    write_atomic(target, "{}")
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_text() == "{}"


def test_a_one_line_message_stays_one_line_however_long_the_value(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("stragglers:\n  - " + "{workers: [0], start: 0.1, duration: 0.1, bogus: 1}\n")
    err = one_line_error(capsys, ["train", "--config", str(job)])
    assert "unknown key 'bogus'" in err
    multi = tmp_path / "multi.yaml"
    multi.write_text('schedule: "bsp:0.5,\\n\\n[red]xsp' + "y" * 3000 + '"\n')
    err = one_line_error(capsys, ["train", "--config", str(multi)])
    assert len(err) <= 1100


def test_a_path_to_a_registry_that_is_a_fifo_is_refused(tmp_path: Path, capsys):
    path = tmp_path / "r.db"
    os.mkfifo(path)
    err = one_line_error(capsys, ["jobs", "--registry", str(path)])
    assert "FIFO" in err


def test_malformed_values_in_a_shared_registry_are_one_line(tmp_path, capsys):
    path = tmp_path / "r.db"
    with Registry(path) as registry:
        from syncswitch.registry import TrialRecord

        job = registry.ensure_job(FP, {"model": "cnn1d"})
        registry.record_trial(job, TrialRecord(0.5, 0, "bsp:0.5,asp", "complete", 0.9, 1.0, "r"))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE trials SET final_accuracy = 'ninety'")
    err = one_line_error(capsys, ["jobs", "--registry", str(path), "--show", FP[:6]])
    assert "malformed value" in err
    with sqlite3.connect(path) as db:
        db.execute("UPDATE jobs SET description = '{not json'")
    err = one_line_error(capsys, ["jobs", "--registry", str(path)])
    assert "malformed value" in err
