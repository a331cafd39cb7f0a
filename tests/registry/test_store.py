"""The registry database: round trips, locations, concurrent writers, refusing foreign files."""

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from syncswitch.registry import (
    ENV_VAR,
    Registry,
    RegistryError,
    RegistryLocation,
    TrialRecord,
    default_path,
)

FP = "ab" * 32


def trial(fraction: float, seed: int, accuracy: float | None = 0.9, status="complete"):
    return TrialRecord(fraction, seed, f"bsp:{fraction},asp", status, accuracy, 12.5, "/runs/x")


def test_jobs_trials_and_decisions_round_trip(tmp_path: Path) -> None:
    with Registry(tmp_path / "r.db") as registry:
        job = registry.ensure_job(FP, {"workers": 8})
        assert registry.ensure_job(FP, {"workers": 8}).id == job.id
        registry.record_trial(job, trial(0.5, 0, 0.91))
        registry.record_trial(job, trial(0.5, 1, None, status="failed: boom"))
        registry.record_trial(job, trial(0.5, 1, 0.92))  # the rerun replaces the failure
        registry.record_trial(job, trial(1.0, 0, 0.93))
        trials = registry.trials(job)
        assert [(t.fraction, t.seed, t.final_accuracy) for t in trials] == [
            (1.0, 0, 0.93),
            (0.5, 0, 0.91),
            (0.5, 1, 0.92),
        ]
        assert all(t.complete for t in trials)
        first = registry.record_decision(
            job, fraction=0.5, tolerance=0.5, repeats=2, evidence={"a": [1.0]}, reason="why"
        )
        again = registry.record_decision(
            job, fraction=0.5, tolerance=0.5, repeats=2, evidence={"a": [1.0]}, reason="why"
        )
        assert again.id == first.id  # the same decision is not stored twice
        other = registry.record_decision(
            job, fraction=0.25, tolerance=1.0, repeats=2, evidence={}, reason="looser"
        )
        assert registry.latest_decision(job) == other
        assert [d.id for d in registry.decisions(job)] == [first.id, other.id]
        (overview,) = registry.overview()
        assert (overview.trials, overview.complete_trials, overview.decisions) == (3, 3, 2)
        assert registry.find_jobs(FP[:6].upper()) == [job]
        assert registry.job("cd" * 32) is None
    # A second process opening the same file sees it all, in WAL mode.
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as registry:
        assert registry.latest_decision(registry.job(FP)).fraction == 0.25
    mode = sqlite3.connect(tmp_path / "r.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_location_from_flag_then_environment_then_user_data_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert RegistryLocation.resolve(None).sqlite_path == default_path()
    assert default_path().name == "registry.db" and "syncswitch" in str(default_path())
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env.db"))
    assert RegistryLocation.resolve(None).sqlite_path == tmp_path / "env.db"
    given = RegistryLocation.resolve(str(tmp_path / "flag.db"))
    assert given.url == f"sqlite:///{tmp_path / 'flag.db'}"
    pg = RegistryLocation.resolve("postgresql+psycopg://team:secret@db.example/sync")
    assert pg.sqlite_path is None and "secret" not in pg.display and pg.exists()
    with pytest.raises(RegistryError, match="not a database URL"):
        RegistryLocation.resolve("nonsense://::")


def test_missing_driver_is_one_clear_line(tmp_path) -> None:
    with pytest.raises(RegistryError, match="driver"):
        Registry("nosuchdb+nodriver://host/db")


def fingerprint_bytes(path: Path) -> tuple[bytes, list[str]]:
    return path.read_bytes(), sorted(p.name for p in path.parent.iterdir())


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (bytes(range(256)) * 40, "is not a SQLite database"),
        (b"SQLite format 3\x00" + b"\xff" * 4000, "cannot read it"),
    ],
)
def test_a_corrupt_file_is_refused_in_one_line_and_left_untouched(tmp_path, content, fragment):
    path = tmp_path / "registry.db"
    path.write_bytes(content)
    before = fingerprint_bytes(path)
    with pytest.raises(RegistryError) as error:
        Registry(path)
    message = str(error.value)
    assert fragment in message and str(path) in message and "\n" not in message
    assert fingerprint_bytes(path) == before


def test_another_programs_database_is_refused_and_left_untouched(tmp_path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    before = fingerprint_bytes(path)
    with pytest.raises(RegistryError, match="not a syncswitch registry"):
        Registry(path)
    assert fingerprint_bytes(path) == before


def test_a_directory_is_refused(tmp_path) -> None:
    with pytest.raises(RegistryError, match="is a directory"):
        Registry(tmp_path)


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from syncswitch.registry import Registry, TrialRecord
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # Start together: both writers are imported and waiting before either opens the file.
    Path(path + "." + name + ".ready").touch()
    while not Path(path + ".go").exists():
        time.sleep(0.01)
    registry = Registry(path)
    job = registry.ensure_job("ab" * 32, {"shared": True})
    mine = registry.ensure_job(name * 64, {"writer": name})
    for i in range(count):
        registry.record_trial(job, TrialRecord(0.5, i + (1000 if name == "b" else 0),
                              "bsp:0.5,asp", "complete", 0.9, 1.0, name))
        registry.record_trial(mine, TrialRecord(0.25, i, "bsp:0.25,asp", "complete", 0.8,
                              1.0, name))
        registry.record_decision(mine, fraction=0.25, tolerance=0.5, repeats=1,
                                 evidence={"i": i}, reason="r")
    registry.close()
    """
)


def test_two_writers_at_once_do_not_corrupt_the_registry(tmp_path) -> None:
    path = tmp_path / "shared.db"  # not there yet: both writers also race to create it
    count = 100
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), name, str(count)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    ready = [Path(f"{path}.{name}.ready") for name in ("a", "b")]
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in ready) and time.monotonic() < deadline:
        time.sleep(0.05)
    Path(f"{path}.go").touch()
    for proc in writers:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Registry(path) as registry:
        shared = registry.job("ab" * 32)
        assert len(registry.trials(shared)) == 2 * count
        for name in ("a", "b"):
            job = registry.job(name * 64)
            assert len(registry.trials(job)) == count
            assert len(registry.decisions(job)) == count
            assert registry.latest_decision(job).evidence == {"i": count - 1}
