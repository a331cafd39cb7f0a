"""From what the user typed to a TrainConfig: a `--config` file's keys and the flags' text,
coerced to each option's type, then built (and so validated) once."""

from __future__ import annotations

from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from syncswitch.config.checks import short
from syncswitch.config.files import read_structured_file
from syncswitch.config.job import TrainConfig
from syncswitch.errors import ConfigError
from syncswitch.keys import unknown_key_problem

_OPTION_NAMES = tuple(f.name for f in fields(TrainConfig))
_OPTIONS_TEXT = "the `syncswitch train` options, e.g. workers, schedule, epochs, lr"

# Options a file may never set (see docs/security.md): a config file can come from anywhere,
# and it must not choose the cluster that receives the job's model, data and code.
FLAG_ONLY = ("ray_address",)

_KINDS = {
    "list[float]": "a comma-separated list of numbers",
    "list[str]": "a comma-separated list of names",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
}


def config_fields() -> list[Field]:
    return list(fields(TrainConfig))


def field_default(f: Field) -> Any:
    return None if f.default is MISSING else f.default


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or TOML job file into a dict of TrainConfig keys (dashes allowed)."""
    data = read_structured_file(path, "config file") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of options")
    normalised = {str(key).replace("-", "_"): value for key, value in data.items()}
    problem = unknown_key_problem(normalised, _OPTION_NAMES, _OPTIONS_TEXT)
    if problem:
        raise ConfigError(f"config file {str(path)!r}: {problem}")
    for name in FLAG_ONLY:
        if name in normalised:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"{name} in {str(path)!r} is not allowed: where the job connects is taken only "
                f"from {flag} or the RAY_ADDRESS environment variable, never from a file"
            )
    return normalised


def parse_value(name: str, type_name: str, value: Any) -> Any:
    """Coerce a flag string or file value to the field's type, or fail naming both."""
    optional = type_name.endswith("| None")
    base = type_name.replace("| None", "").strip()
    if value is None or (optional and isinstance(value, str) and value.lower() == "none"):
        return None
    try:
        return _coerce(base, value)
    except (TypeError, ValueError, OverflowError):
        kind = _KINDS.get(base, f"a {base}")
        raise ConfigError(f"{name} = {short(value)} is not allowed; it must be {kind}") from None


def _coerce(base: str, value: Any) -> Any:
    if base == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "yes", "1", "on"):
            return True
        if text in ("false", "no", "0", "off"):
            return False
        raise ValueError
    if base == "int":
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(value)
    if base == "float":
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    if base == "list":
        if not isinstance(value, list):
            raise ValueError
        return value
    if base == "list[float]":
        items = value.split(",") if isinstance(value, str) else list(value)
        return [float(item) for item in items if str(item).strip()]
    if base == "list[str]":
        # "a,b", ["a", "b"] and a repeated flag's ["a", "b,c"] alike.
        items = [value] if isinstance(value, str) else list(value)
        names = [n.strip().lower() for item in items for n in str(item).split(",")]
        return list(dict.fromkeys(n for n in names if n))
    return str(value)


def make_config(values: dict[str, Any]) -> TrainConfig:
    """Build a validated TrainConfig from loosely typed values (flags or file entries)."""
    problem = unknown_key_problem(values, _OPTION_NAMES, _OPTIONS_TEXT)
    if problem:
        raise ConfigError(problem)
    by_name = {f.name: f for f in fields(TrainConfig)}
    return TrainConfig(
        **{name: parse_value(name, str(by_name[name].type), v) for name, v in values.items()}
    )
