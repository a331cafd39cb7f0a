"""Issue 24 case 5: nonsense that used to be accepted is one line (or, for listing, a
friendly line and nothing written)."""

from __future__ import annotations

import sqlite3

import pytest

from syncswitch.config import ConfigError, make_config
from syncswitch.control.plan import RunPlan
from syncswitch.errors import RegistryError
from syncswitch.registry import Registry
from tests.security.helpers import one_line_error


def test_an_evaluation_interval_below_one_step_is_refused():
    config = make_config({"workers": 2, "batch_size": 64, "epochs": 1.0, "eval_every": 0.0001})
    with pytest.raises(ConfigError) as error:
        RunPlan.resolve(config, train_samples=1000)  # one step = 64/1000: 640 evaluations
    message = str(error.value)
    assert "eval_every" in message and "one step" in message and "\n" not in message
    ok = {"batch_size": 64, "epochs": 1.0, "eval_every": 0.00065}
    RunPlan.resolve(make_config(ok), train_samples=1000)
    # A smoke test whose one step is the whole dataset keeps its default interval.
    RunPlan.resolve(make_config({"batch_size": 32}), train_samples=8)


def test_the_cli_refuses_it_in_one_line(capsys, tmp_path):
    err = one_line_error(
        capsys,
        [
            "train",
            "--eval-every",
            "0.0001",
            "--epochs",
            "1",
            "--mnist1d-samples",
            "200",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert "eval_every" in err


def test_jobs_on_an_empty_file_creates_no_registry(tmp_path, capsys):
    from syncswitch.cli.main import main

    empty = tmp_path / "registry.db"
    empty.touch()
    assert main(["jobs", "--registry", str(empty)]) == 0
    assert "no registry" in capsys.readouterr().out
    assert empty.read_bytes() == b""
    assert not (tmp_path / "registry.db-wal").exists()


def test_listing_a_database_without_a_registry_writes_nothing(tmp_path):
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()  # a valid, empty SQLite database
    with sqlite3.connect(other) as connection:
        connection.execute("PRAGMA user_version = 1")
    connection.close()
    before = other.read_bytes()
    with pytest.raises(RegistryError) as error:
        Registry(other, create=False)
    assert "listing never creates" in str(error.value)
    assert other.read_bytes() == before
