"""The training job's configuration.

- `job`: `TrainConfig`, the frozen job, validated once when it is built;
- `options`: its fields, each declaring its help, checks and role (`TrainOptions`);
- `declare`: what a role says (`--help` group, part in the job's identity, what `--resume`
  does with it) and what is derived from the roles (`flag_groups`, `resume_overrides`, ...);
- `validation`: what relates options to each other, checked once, and what that parses;
- `components`: each component's configuration built from the options, one function per
  component (the only place that builds it);
- `checks`: the per-option checks (type, size, choices, `Range`) that fields declare;
- `limits`: the choices and the bounds of every size a user may ask for;
- `files`: reading YAML/TOML job, cluster and list files safely;
- `values`: flags and file entries coerced to the options' types (`make_config`).
"""

from syncswitch.config.files import load_list_file, read_structured_file
from syncswitch.config.job import TrainConfig
from syncswitch.config.limits import (
    AUTO_SCHEDULE,
    DATASETS,
    DEFAULT_MODEL,
    DEVICES,
    MAX_CONFIG_FILE_BYTES,
    MAX_LIST_ITEMS,
    MAX_TEXT_CHARS,
    MODELS,
    PLACEMENTS,
    RUNTIMES,
)
from syncswitch.config.values import (
    FLAG_ONLY,
    config_fields,
    field_default,
    load_config_file,
    make_config,
    parse_value,
)
from syncswitch.errors import ConfigError

__all__ = [
    "AUTO_SCHEDULE",
    "DATASETS",
    "DEFAULT_MODEL",
    "DEVICES",
    "FLAG_ONLY",
    "MAX_CONFIG_FILE_BYTES",
    "MAX_LIST_ITEMS",
    "MAX_TEXT_CHARS",
    "MODELS",
    "PLACEMENTS",
    "RUNTIMES",
    "ConfigError",
    "TrainConfig",
    "config_fields",
    "field_default",
    "load_config_file",
    "load_list_file",
    "make_config",
    "parse_value",
    "read_structured_file",
]
