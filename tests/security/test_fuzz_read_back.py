"""The fuzz suite's third part (issue 35), beside tests/security/test_fuzz.py and with its
strategies and bounds: logs cut at any byte (a crash, a full disk), control characters in
what is printed back, names around the 255-byte limit, and job descriptions in the registry
whose values have the wrong type. Each ends in success or one line, never a traceback."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from syncswitch.cli.main import main
from syncswitch.rundir.writer import GROWING_LOGS, RunWriter
from tests.security.test_fuzz import (
    BOUNDED,
    HYPOTHESIS_EXAMPLES,
    _json_text,
    hostile_values,
    one_line_or_success,
    registry_template,  # noqa: F401 (a fixture the registry case uses)
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs-0.1.0" / "online"
CONTROLS = "".join(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))) + "\u202e\u2066"
hostile_text = st.text(
    alphabet=st.one_of(st.sampled_from(CONTROLS), st.characters(codec="utf-8")), max_size=30
)


# What `jobs` formats from a stored job description (numbers, names, the emulation).
DESCRIPTION_KEYS = (
    *("lr", "epochs", "workers", "batch_size", "step_time_ms", "jitter_sigma", "model"),
    *("dataset", "mnist1d_samples", "runtime", "cluster", "speed_factors"),
)


def _whole_rows(path: Path) -> None:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    if path.suffix == ".csv" and data:
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
        assert all(len(row) == len(rows[0]) for row in rows), path


@settings(BOUNDED, max_examples=max(HYPOTHESIS_EXAMPLES, 1))
@given(name=st.sampled_from(GROWING_LOGS), cut=st.floats(min_value=0.0, max_value=1.0))
def test_a_log_cut_at_any_byte_resumes_with_whole_rows(name, cut):
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        shutil.copytree(FIXTURE, run_dir)
        path = run_dir / name
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * cut)])
        # A cut is never refused: the torn line goes, whole rows stay (even a cut header).
        RunWriter(run_dir, {}, {}, resume_at=(10**9, 1e9)).close()
        for log in GROWING_LOGS:
            if (run_dir / log).exists():
                _whole_rows(run_dir / log)


@settings(BOUNDED, max_examples=max(HYPOTHESIS_EXAMPLES // 2, 1))
@given(field=st.sampled_from(["dataset", "model", "schedule", "runtime"]), text=hostile_text)
def test_text_from_a_run_directory_reaches_the_terminal_escaped(field, text):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        run_dir = root / "run"
        shutil.copytree(FIXTURE, run_dir)
        config = json.loads((run_dir / "config.json").read_text())
        config[field] = text
        (run_dir / "config.json").write_text(json.dumps(config))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["report", str(run_dir)])
        shown = out.getvalue() + err.getvalue()
        assert code in (0, 2) and not set(shown) & (set(CONTROLS) - {"\n"}), repr(shown[-300:])


@settings(BOUNDED, max_examples=max(HYPOTHESIS_EXAMPLES // 2, 1))
@given(
    size=st.integers(min_value=250, max_value=300),
    where=st.sampled_from(["out", "registry"]),
    char=st.sampled_from(["n", "é"]),
)
def test_names_around_the_limit_end_in_one_line_or_success(size, where, char):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        name = char * (size // len(char.encode()))
        if where == "out":
            argv = ["train", "--runtime", "sim", "--workers", "2", "--epochs", "0.25"]
            argv += ["--mnist1d-samples", "400", "--schedule", "bsp", "--no-progress"]
            argv += ["--out", str(root / name)]
        else:
            argv = ["jobs", "--registry", str(root / name / "registry.db")]
        sandbox = root / "sandbox"
        sandbox.mkdir()
        one_line_or_success(argv, sandbox)


@settings(BOUNDED, max_examples=max(HYPOTHESIS_EXAMPLES, 1))
@given(
    key=st.sampled_from(DESCRIPTION_KEYS),
    # Half the time a value of a type no run stores there (text, a list, a mapping).
    value=st.one_of(st.sampled_from(["fast", "[/]", "", [1], {"a": 1}]), hostile_values),
    sim=st.booleans(),
)
def test_job_descriptions_with_values_of_any_type_end_in_one_line_or_success(
    registry_template,  # noqa: F811
    key,
    value,
    sim,
):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        path = root / "registry.db"
        shutil.copy(registry_template, path)
        with contextlib.closing(sqlite3.connect(path)) as connection, connection:
            (text,) = connection.execute("SELECT description FROM jobs").fetchone()
            description = json.loads(text)
            description[key] = value
            if sim:
                description["runtime"] = "sim"
            connection.execute("UPDATE jobs SET description = ?", (_json_text(description),))
        one_line_or_success(["jobs", "--registry", str(path)], root)
        one_line_or_success(["jobs", "--registry", str(path), "--show", ""], root)
