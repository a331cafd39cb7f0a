"""A small seeded fuzzer for what users and files hand the CLI: config files (YAML and TOML),
schedules, and straggler and fault manifests.

Every case must end in success or a user error (the CLI's one line, exit 2), never another
exception; nothing in it may run (a canary file is never created); memory stays bounded.
CI runs a few hundred cases in-process and a handful through the real command;
SYNCSWITCH_FUZZ_CASES=N (and SYNCSWITCH_FUZZ_SEED) run more, and `-m slow` runs 5,000.
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
