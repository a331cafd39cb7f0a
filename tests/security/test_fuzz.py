"""A small seeded fuzzer for what users and files hand the CLI: config files (YAML and TOML),
schedules, and straggler and fault manifests.

Every case must end in success or a user error (the CLI's one line, exit 2), never another
exception; nothing in it may run (a canary file is never created); memory stays bounded.
CI runs a few hundred cases in-process and a handful through the real command;
SYNCSWITCH_FUZZ_CASES=N (and SYNCSWITCH_FUZZ_SEED) run more, and `-m slow` runs 5,000.

The second half (issue 24) generates, with hypothesis, the files the project reads back: run
directories, registry rows (also as `--schedule auto` reads them), cluster files and CIFAR
batches with hostile values; SYNCSWITCH_HYPOTHESIS_EXAMPLES=N runs more than CI's 25.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncswitch.config import config_fields, load_config_file, load_list_file, make_config
from syncswitch.errors import UserError
from tests.security.helpers import assert_one_line_exit_2, run_cli

CI_CASES = int(os.environ.get("SYNCSWITCH_FUZZ_CASES", "300"))
SEED = int(os.environ.get("SYNCSWITCH_FUZZ_SEED", "16"))
CLI_CASES = 4
MAX_GROWTH_KIB = 400 << 10  # the whole run's peak memory may grow by this much


@dataclass
class Case:
    kind: str  # "config" | "schedule" | "stragglers" | "faults"
    path: Path | None
    text: str | bytes | None = None
    value: Any = None


@dataclass
class Fuzzer:
    seed: int
    root: Path
    canary: Path
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- values ----------------------------------------------------------------------------

    def scalar(self) -> Any:
        r = self.rng
        return r.choice(
            [
                0,
                -1,
                1,
                2,
                7,
                10 ** r.randint(3, 30),
                -(10 ** r.randint(3, 30)),
                r.random(),
                r.uniform(-1e6, 1e6),
                1e308,
                -1e-308,
                math.inf,
                -math.inf,
                math.nan,
                True,
                False,
                None,
                "",
                "none",
                "auto",
                "bsp",
                "bsp:0.5,asp",
                "ssp-3",
                "[/]",
                "[bold red]x[/]",
                ":smile:",
                "a\nb",
                "\x00",
                "x" * r.randint(100, 6000),
                "1e400",
                "-0",
                "0x10",
                "ray://attacker.example:1",
                "../../etc/passwd",
                "é中文",
            ]
        )

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        roll = r.random()
        if depth > 3 or roll < 0.6:
            return self.scalar()
        if roll < 0.8:
            return [self.value(depth + 1) for _ in range(r.randint(0, 5))]
        return {str(self.scalar())[:20]: self.value(depth + 1) for _ in range(r.randint(0, 4))}

    def schedule(self) -> str:
        r = self.rng
        if r.random() < 0.3:
            tokens = ["bsp", "asp", "ssp-", "ssp-3", ":", ",", "0.5", "1", "0", "-1", "1e400"]
            tokens += ["nan", "auto", "x", "0.25", "::", ",,", " "]
            return "".join(r.choice(tokens) for _ in range(r.randint(0, 12)))
        protocols = ["bsp", "asp", "ssp-0", "ssp-3", "ssp-" + "9" * r.randint(1, 30), "BSP"]
        ends = ["0.1", "0.25", "0.5", "0.75", "0.9", "1", "0", "1e-300", "0.9999999999999999"]
        phases = [f"{r.choice(protocols)}:{r.choice(ends)}" for _ in range(r.randint(0, 5))]
        return ",".join([*phases, r.choice(protocols)])

    def plausible(self, name: str) -> Any:
        """A value of the right kind for field `name`, often near or past its limits."""
        r = self.rng
        f = next(f for f in config_fields() if f.name == name)
        base = str(f.type).replace("| None", "").strip()
        if f.metadata.get("choices"):
            return r.choice([*f.metadata["choices"], "other"])
        if name == "schedule":
            return self.schedule()
        if name in ("stragglers", "faults"):
            return [self.episode() for _ in range(r.randint(0, 3))]
        if base == "int":
            return r.choice([0, 1, 2, 3, 8, 16, 63, 64, 65, 1024, 1025, 10**6, 2**31, -5])
        if base == "float":
            return r.choice([0.0, 1e-5, 1e-4, 0.05, 0.5, 0.99, 1.0, 1.5, 10.0, 1e4, 1e9])
        if base == "bool":
            return r.choice([True, False, "yes", "off", 2])
        if base == "list[float]":
            return [r.choice([0.1, 0.5, 1.0, 2.0, -1.0, 1e9]) for _ in range(r.randint(0, 9))]
        return self.scalar()

    def episode(self) -> Any:
        r = self.rng
        if r.random() < 0.2:
            return self.value()
        if r.random() < 0.2:
            generator = r.choice(["random", "paper"])
            keys = [
                "count",
                "stragglers",
                "duration",
                "delay_ms",
                "factor",
                "window",
                "seed",
                "occurrences",
                "coverage",
                "bogus",
            ]
            return {generator: {k: self.scalar() for k in r.sample(keys, r.randint(0, 6))}}
        keys = [
            "workers",
            "start",
            "start_s",
            "duration",
            "duration_s",
            "delay_ms",
            "factor",
            "kind",
            "worker",
            "at",
            "bogus",
        ]
        item = {k: self.scalar() for k in r.sample(keys, r.randint(0, 5))}
        if r.random() < 0.5:
            item["workers"] = [r.choice([0, 1, 7, -1, 10**9, "a"]) for _ in range(r.randint(0, 3))]
        if r.random() < 0.5:
            item["kind"] = r.choice(["nan_gradient", "wrong_shape", "crash", "hang", "boom"])
        return item

    # -- files -----------------------------------------------------------------------------

    def config_values(self) -> dict[str, Any]:
        r = self.rng
        names = [f.name for f in config_fields()]
        values = {
            name: self.plausible(name) if r.random() < 0.8 else self.value()
            for name in r.sample(names, r.randint(0, 6))
        }
        if r.random() < 0.1:
            values[r.choice(["bogus", "ray-address", "workers ", "ray_address"])] = self.value()
        return values

    def render(self, data: Any, suffix: str) -> str | bytes:
        if suffix == ".toml":
            return _toml(data)
        try:
            return yaml.safe_dump(data, allow_unicode=True)
        except yaml.YAMLError:
            return json.dumps(data, default=str)

    def mutate(self, text: str | bytes) -> str | bytes:
        r = self.rng
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        roll = r.random()
        if roll < 0.10 and raw:
            cut = r.randrange(len(raw))
            return raw[:cut]
        if roll < 0.20 and raw:
            at = r.randrange(len(raw))
            return raw[:at] + bytes([r.randrange(256)]) + raw[at + 1 :]
        if roll < 0.27:
            return raw + b"\nx: &a [1, 2]\ny: *a\n"
        if roll < 0.34:
            tag = r.choice(
                [
                    "!!python/object/apply:os.system",
                    "!!python/name:os.system",
                    "!!python/object/new:subprocess.Popen",
                ]
            )
            return raw + f'\nschedule: {tag} ["touch {self.canary}"]\n'.encode()
        if roll < 0.38:
            depth = r.choice([50, 5000, 200_000])
            return raw + b"\nlr_milestones: " + b"[" * depth + b"]" * depth + b"\n"
        if roll < 0.42:
            return b"\xff\xfe" + raw
        if roll < 0.46:
            return raw + b"\nworkers: 1" + b"0" * r.choice([10, 5000]) + b"\n"
        return raw

    def case(self, index: int) -> Case:
        r = self.rng
        kind = r.choice(["config", "config", "schedule", "stragglers", "faults"])
        if kind == "schedule":
            return Case(kind, None, value=self.schedule())
        suffix = r.choice([".yaml", ".yml", ".toml"])
        path = self.root / f"case-{index}{suffix}"
        if kind == "config":
            data: Any = self.config_values()
        else:
            items = [self.episode() for _ in range(r.randint(0, 4))]
            data = {kind: items} if suffix == ".toml" or r.random() < 0.3 else items
        text = self.mutate(self.render(data, suffix))
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return Case(kind, path, text=text)


def _toml(data: Any) -> str:
    """A TOML rendering of simple data (tomllib only reads); odd values come out as strings."""
    lines = []
    for key, value in data.items() if isinstance(data, dict) else [("v", data)]:
        lines.append(f"{json.dumps(str(key))} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{" + inner + "}"
    return json.dumps("" if value is None else str(value))


def check_case(case: Case) -> str | None:
    """Run one case in-process; return the user error's message, None if accepted."""
    try:
        if case.kind == "schedule":
            make_config({"schedule": case.value})
        elif case.kind == "config":
            assert case.path is not None
            make_config(load_config_file(case.path))
        else:
            assert case.path is not None
            data = load_list_file(case.path, case.kind)
            make_config({case.kind: data, "workers": 8, "step_time_ms": 10.0})
    except UserError as error:
        return str(error)
    return None


def run_fuzz(tmp_path: Path, cases: int, on_refused: Callable[[Case, str], None]) -> int:
    canary = tmp_path / "CANARY"
    fuzzer = Fuzzer(SEED, tmp_path, canary)
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    refused = 0
    for index in range(cases):
        case = fuzzer.case(index)
        try:
            message = check_case(case)
        except Exception as error:  # anything but a user error is a finding
            shown = case.text if case.text is not None else case.value
            raise AssertionError(
                f"case {index} (seed {SEED}, {case.kind}): {type(error).__name__}: {error}\n"
                f"input: {str(shown)[:2000]!r}"
            ) from error
        if message is not None:
            refused += 1
            assert message.strip(), f"case {index}: an empty error message"
            on_refused(case, message)
        assert not canary.exists(), f"case {index} ran code: {case.text!r}"
        if case.path is not None:
            case.path.unlink()
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib
    assert grown_kib < MAX_GROWTH_KIB, f"peak memory grew by {grown_kib} KiB"
    return refused


def test_fuzzed_configs_schedules_and_manifests_end_in_one_line_or_success(tmp_path):
    refused = run_fuzz(tmp_path, CI_CASES, lambda case, message: None)
    assert refused > CI_CASES // 3  # the fuzzer does reach the checks, not only happy paths


def test_fuzzed_files_through_the_real_command_exit_2_with_one_line(tmp_path):
    picked: list[Case] = []

    def keep(case: Case, message: str) -> None:
        if case.kind == "config" and len(picked) < CLI_CASES:
            kept = tmp_path / "cli" / case.path.name
            kept.parent.mkdir(exist_ok=True)
            kept.write_bytes(case.path.read_bytes())
            picked.append(Case(case.kind, kept, case.text))

    run_fuzz(tmp_path, 60, keep)
    assert len(picked) == CLI_CASES
    for case in picked:
        proc = run_cli(["train", "--config", str(case.path), "--no-progress"], timeout_s=120)
        assert_one_line_exit_2(proc)
        assert not (tmp_path / "CANARY").exists()


@pytest.mark.slow
def test_fuzz_long(tmp_path):
    run_fuzz(tmp_path, 5000, lambda case, message: None)


# -- files the project reads back, generated by hypothesis (issue 24) -------------------------
#
# Run directories (for `report`), registry rows (for `jobs`), cluster files and CIFAR batches,
# with hostile values: non-finite, huge, negative, wrongly typed, missing, deeply nested,
# markup in names. Each must end in success or exit 2 with one line and no traceback, and
# write nothing outside its target. Bounded: HYPOTHESIS_EXAMPLES examples per target, each
# within a deadline, so the whole adds well under a minute to CI.

import contextlib  # noqa: E402
import io  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from syncswitch.cli.main import main  # noqa: E402

HYPOTHESIS_EXAMPLES = int(os.environ.get("SYNCSWITCH_HYPOTHESIS_EXAMPLES", "25"))
BOUNDED = settings(
    max_examples=HYPOTHESIS_EXAMPLES,
    deadline=None,  # the machine may be shared; each example is bounded by its input sizes
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same examples on every CI run
    database=None,
)

hostile_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "[/]", "[bold]x[/bold]", "$\\frac{$", "a\nb", "\x00", "%s%n", "é" * 3]),
    st.text(max_size=20),
)


@dataclass(frozen=True)
class Deep:
    """A value nested `depth` lists deep, written out only as JSON text (hypothesis prints
    examples, and printing a 100,000-deep list would itself recurse too deeply)."""

    depth: int

    def text(self) -> str:
        return "[" * self.depth + "0" + "]" * self.depth


hostile_values = st.one_of(
    hostile_scalars,
    st.lists(hostile_scalars, max_size=4),
    st.dictionaries(st.text(max_size=8), hostile_scalars, max_size=4),
    st.sampled_from([Deep(5_000), Deep(100_000)]),  # deeper than json can recurse
)

_DEEP_MARK = "__deep_value_%d__"


def _json_text(value: Any) -> str:
    """JSON as a run could have written it, or as an attacker would (NaN, Infinity, depth)."""
    deep: list[Deep] = []

    def mark(item: Any) -> str:
        if isinstance(item, Deep):
            deep.append(item)
            return _DEEP_MARK % (len(deep) - 1)
        raise TypeError(type(item).__name__)

    text = json.dumps(value, allow_nan=True, default=mark)
    for index, item in enumerate(deep):
        text = text.replace(json.dumps(_DEEP_MARK % index), item.text())
    return text


def one_line_or_success(argv: list[str], outside: Path) -> int:
    """Run the CLI in-process: success, or exit 2 with one line; nothing new in `outside`."""
    before = sorted(p.name for p in outside.iterdir())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    message = err.getvalue().strip()
    assert code in (0, 2), (code, message[-2000:])
    if code == 2:
        assert len(message.splitlines()) == 1 and "Traceback" not in message, message[-2000:]
    assert sorted(p.name for p in outside.iterdir()) == before
    return code


def _run_dir(root: Path) -> Path:
    from tests.security.test_hangs import big_run_dir

    return big_run_dir(root, "run", switches=3, marks=4, workers=3, rows=20)


RUN_FILES = ("summary.json", "config.json", "events.jsonl", "metrics.csv")


@settings(BOUNDED, max_examples=max(HYPOTHESIS_EXAMPLES // 2, 1))
@given(
    name=st.sampled_from(RUN_FILES),
    field_index=st.integers(min_value=0, max_value=40),
    value=hostile_values,
    drop=st.booleans(),
    plot=st.booleans(),
)
def test_hostile_run_directories_end_in_one_line(name, field_index, value, drop, plot):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        run_dir = _run_dir(root)
        path = run_dir / name
        if name.endswith(".json"):
            data = json.loads(path.read_text())
            keys = sorted(data) or ["x"]
            key = keys[field_index % len(keys)]
            if drop:
                data.pop(key, None)
            else:
                data[key] = value
            path.write_text(_json_text(data))
        elif name == "events.jsonl":
            lines = path.read_text().splitlines()
            event = json.loads(lines[field_index % len(lines)])
            key = sorted(event)[field_index % len(event)]
            event[key] = value
            lines[field_index % len(lines)] = _json_text(event)
            path.write_text("\n".join(lines) + "\n")
        else:
            lines = path.read_text().splitlines()
            row = lines[1 + field_index % (len(lines) - 1)].split(",")
            row[field_index % len(row)] = str(value).replace("\n", " ").replace(",", ";")[:200]
            lines[1 + field_index % (len(lines) - 1)] = ",".join(row)
            path.write_text("\n".join(lines) + "\n")
        target = root / "out"
        target.mkdir()
        one_line_or_success(["report", str(run_dir)], root)
        if plot:  # drawing takes a second or two: half the examples
            one_line_or_success(["report", str(run_dir), "--plot", str(target / "r.png")], root)


REGISTRY_COLUMNS = {
    "jobs": ("fingerprint", "description", "created"),
    "trials": (
        "fraction",
        "seed",
        "schedule",
        "status",
        "final_accuracy",
        "wall_time_s",
        "run_dir",
        "created",
        "concurrent",
    ),
    "decisions": ("fraction", "tolerance", "repeats", "evidence", "reason", "created"),
}


@pytest.fixture(scope="module")
def registry_template(tmp_path_factory) -> Path:
    """A registry holding one job, one trial and one decision, as a search leaves it."""
    from syncswitch.config import TrainConfig
    from syncswitch.registry import Registry, TrialRecord, describe_job, fingerprint

    path = tmp_path_factory.mktemp("registry") / "registry.db"
    config = TrainConfig(workers=2, epochs=1.0)
    with Registry(path) as registry:
        job = registry.ensure_job(fingerprint(config), describe_job(config))
        registry.record_trial(
            job, TrialRecord(0.5, 0, "bsp:0.5,asp", "complete", 0.9, 10.0, "runs/x", concurrent=1)
        )
        registry.record_decision(
            job, fraction=0.5, tolerance=0.5, repeats=1, evidence={"tried": []}, reason="ok"
        )
    return path


@BOUNDED
@given(
    table=st.sampled_from(sorted(REGISTRY_COLUMNS)),
    column_index=st.integers(min_value=0, max_value=20),
    value=hostile_values,
)
def test_hostile_registry_rows_end_in_one_line(registry_template, table, column_index, value):
    columns = REGISTRY_COLUMNS[table]
    column = columns[column_index % len(columns)]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        path = root / "registry.db"
        shutil.copy(registry_template, path)
        plain = isinstance(value, (int, float, str, type(None)))
        stored = value if plain else _json_text(value)
        if isinstance(stored, int) and not -(2**63) <= stored < 2**63:
            stored = str(stored)
        with contextlib.closing(sqlite3.connect(path)) as connection, connection:
            try:
                connection.execute(f"UPDATE {table} SET {column} = ?", (stored,))
            except sqlite3.IntegrityError:
                return  # a NOT NULL column: the database itself refuses it
        one_line_or_success(["jobs", "--registry", str(path)], root)
        one_line_or_success(["jobs", "--registry", str(path), "--show", "0"], root)


CLUSTER_KEYS = (
    "compute",
    "network",
    "server",
    "workers",
    "step_time_ms",
    "latency_ms",
    "bandwidth_gbps",
    "message_ms",
    "jitter_sigma",
    "speed_factors",
)


@BOUNDED
@given(
    data=st.dictionaries(
        st.sampled_from(CLUSTER_KEYS),
        st.one_of(hostile_values, st.dictionaries(st.sampled_from(CLUSTER_KEYS), hostile_values)),
        max_size=4,
    )
)
def test_hostile_cluster_files_end_in_one_line(data):
    from syncswitch.config import make_config

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "cluster.yaml"
        path.write_text(_json_text(data))  # JSON is YAML
        try:
            config = make_config({"runtime": "sim", "cluster": str(path), "workers": 2})
            config.parsed.sim_cluster()
        except UserError as error:
            assert "\n" not in str(error) and str(error).strip()


@BOUNDED
@given(
    labels=st.one_of(hostile_values, st.lists(st.integers(-5, 20), max_size=4)),
    data_shape=st.sampled_from([(2, 3072), (2, 10), (0, 3072), (3072,)]),
    dtype=st.sampled_from(["uint8", "float32", "int64"]),
    key=st.sampled_from([b"labels", "labels", b"data"]),
)
def test_hostile_cifar_batches_end_in_one_line(labels, data_shape, dtype, key):
    from syncswitch.workloads import load_dataset

    batch = {b"data": np.zeros(data_shape, dtype), key: labels}
    try:
        payload = pickle.dumps(batch, protocol=2)
    except RecursionError:
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "cifar-10-batches-py"
        folder.mkdir()
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            (folder / name).write_bytes(payload)
        try:
            load_dataset("cifar10", scratch)
        except UserError as error:
            assert "\n" not in str(error) and str(error).strip()


@BOUNDED
@given(
    column=st.sampled_from(["fraction", "tolerance", "repeats", "evidence", "reason"]),
    value=hostile_values,
)
def test_hostile_decisions_for_schedule_auto_end_in_one_line(registry_template, column, value):
    """`--schedule auto` takes the stored decision: it must be refused as it is read, or be a
    schedule the config accepts (or refuses in one line)."""
    from syncswitch.config import TrainConfig, make_config
    from syncswitch.recurring.auto import auto_schedule

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "registry.db"
        shutil.copy(registry_template, path)
        plain = isinstance(value, (int, float, str, type(None)))
        stored = value if plain else _json_text(value)
        if isinstance(stored, int) and not -(2**63) <= stored < 2**63:
            stored = str(stored)
        with contextlib.closing(sqlite3.connect(path)) as connection, connection:
            try:
                connection.execute(f"UPDATE decisions SET {column} = ?", (stored,))
            except sqlite3.IntegrityError:
                return
        try:
            schedule, _ = auto_schedule(TrainConfig(workers=2, epochs=1.0), str(path))
            make_config({"workers": 2, "epochs": 1.0, "schedule": schedule})
        except UserError as error:
            assert "\n" not in str(error) and str(error).strip()
