"""Issue 24 case 1: a search never deletes or takes over what it did not make.

Two jobs sharing a `--search-dir` keep their trials apart; a trial directory that holds no
marker of this job is refused, never removed; a link or a file where a search directory or a
trial directory should be is refused in one line, and the link's target is left alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from syncswitch.core.timing.fraction_search import TrialKey
from syncswitch.errors import UserError
from syncswitch.recurring.search_runner import SearchOptions, run_search, trial_dir
from syncswitch.registry import Registry, fingerprint
from tests.recurring.test_search_runner import JOB, ScriptedTrainer


def search(tmp_path: Path, job=JOB, **options):
    values = dict(repeats=1, resolution=1 / 8, search_dir=str(tmp_path / "shared"))
    values.update(options)
    with Registry(tmp_path / "registry.db") as registry:
        return run_search(job, SearchOptions(**values), registry, trainer=ScriptedTrainer())


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert isinstance(error.value, UserError) and "\n" not in message
    return message


def test_two_jobs_sharing_a_search_dir_keep_their_trials(tmp_path) -> None:
    other = replace(JOB, epochs=3.0)
    first = search(tmp_path)
    before = {p: p.read_bytes() for p in first.search_dir.rglob("summary.json")}
    second = search(tmp_path, other)
    assert first.search_dir != second.search_dir
    # The first job's trials are all still there, unchanged.
    assert {p: p.read_bytes() for p in first.search_dir.rglob("summary.json")} == before
    # Every registry row points at a run directory made by its own job.
    with Registry(tmp_path / "registry.db") as registry:
        for job in (JOB, other):
            rows = registry.trials(registry.job(fingerprint(job)))
            assert rows
            for row in rows:
                summary = json.loads((Path(row.run_dir) / "summary.json").read_text())
                assert summary["schedule_source"]["fingerprint"] == fingerprint(job)


def test_a_trial_directory_this_job_did_not_make_is_refused_not_deleted(tmp_path) -> None:
    job_dir = tmp_path / "shared" / fingerprint(JOB)[:12]
    planted = trial_dir(job_dir, TrialKey(1.0, 0))
    planted.mkdir(parents=True)
    (planted / "config.json").write_text("{}")
    (planted / "precious.txt").write_text("not yours")
    with pytest.raises(UserError) as error:
        search(tmp_path)
    assert "was not made by this trial" in one_line(error)
    assert (planted / "precious.txt").read_text() == "not yours"


def test_a_job_directory_of_another_job_is_refused(tmp_path) -> None:
    job_dir = tmp_path / "shared" / fingerprint(JOB)[:12]
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({"fingerprint": "0" * 64}))
    with pytest.raises(UserError) as error:
        search(tmp_path)
    assert "belongs to another job" in one_line(error)


@pytest.mark.parametrize("kind", ["file", "link", "dangling"])
def test_a_trial_path_that_is_a_file_or_a_link_is_refused(tmp_path, kind) -> None:
    job_dir = tmp_path / "shared" / fingerprint(JOB)[:12]
    job_dir.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    planted = trial_dir(job_dir, TrialKey(1.0, 0))
    if kind == "file":
        planted.write_text("a file")
    else:
        if kind == "link":
            target.mkdir()
            (target / "keep").write_text("keep")
        os.symlink(target, planted)
    with pytest.raises(UserError) as error:
        search(tmp_path)
    message = one_line(error)
    assert ("symbolic link" if kind != "file" else "not a directory") in message
    if kind == "link":
        assert (target / "keep").read_text() == "keep" and len(list(target.iterdir())) == 1
    if kind == "dangling":
        assert not target.exists()


def test_a_job_directory_that_is_a_link_is_refused(tmp_path) -> None:
    (tmp_path / "shared").mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / "shared" / fingerprint(JOB)[:12])
    with pytest.raises(UserError) as error:
        search(tmp_path)
    assert "symbolic link" in one_line(error)
    assert list(target.iterdir()) == []
