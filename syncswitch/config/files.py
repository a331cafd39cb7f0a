"""Reading a job's YAML/TOML files safely: config files, cluster files, straggler and fault
lists. Files may come from anywhere (docs/security.md): a bounded regular file, YAML without
object tags or aliases, and every way reading can fail ends in one ConfigError line."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from syncswitch.config.limits import MAX_CONFIG_FILE_BYTES, MAX_LIST_ITEMS
from syncswitch.errors import ConfigError
from syncswitch.files import UnsafeFileError, read_regular


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases (&name / *name), nor a key given twice.

    An alias refers to an earlier node, so a few hundred bytes of nested aliases describe a
    structure of billions of entries (the "billion laughs"); no job file needs them. A key
    given twice in one mapping would silently take the last value (TOML refuses it too).
    """

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
                seen[key] = line
            except TypeError:  # an unhashable key: the safe loader refuses it itself
                continue
            if first is not None:
                raise _AliasRefused(
                    f"key {str(key)[:40]!r} is given twice (lines {first} and {line}); give "
                    "each key once"
                )
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = event.start_mark
            raise _AliasRefused(
                f"anchors and aliases (&name, *name) are not allowed (line {mark.line + 1})"
            )
        return super().compose_node(parent, index)


class _AliasRefused(Exception):
    pass


def read_structured_file(path: str | Path, what: str) -> Any:
    """Parse a YAML or TOML file (YAML loaded safely: no tags that build objects, no aliases).

    Only a regular file of at most MAX_CONFIG_FILE_BYTES is read (a FIFO or a device would
    block or never end), and every way parsing can fail ends in one ConfigError line.
    """
    path = Path(path)
    shown = str(path)
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise ConfigError(f"{what} {shown!r}: use a .yaml, .yml or .toml file")
    try:
        raw = read_regular(path, MAX_CONFIG_FILE_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{what} {shown!r} does not exist") from None
    except OSError as error:
        raise ConfigError(f"{what} {shown!r} cannot be read: {_os_reason(error)}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{what} {shown!r} is not UTF-8 text (byte {error.start}); save it as UTF-8"
        ) from None
    try:
        if path.suffix == ".toml":
            return tomllib.loads(text)
        return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except _AliasRefused as error:
        raise ConfigError(f"{what} {shown!r}: {error}") from None
    except RecursionError:
        raise ConfigError(f"{what} {shown!r} is nested too deeply to be a job file") from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError) as error:
        # ValueError: e.g. an integer literal too long for Python to convert.
        detail = " ".join(str(error).split())  # one line, however the parser formats it
        raise ConfigError(f"{what} {shown!r} cannot be parsed: {detail[:300]}") from None


def _os_reason(error: OSError) -> str:
    if isinstance(error, UnsafeFileError):
        return str(error)
    return error.strerror or type(error).__name__


def load_list_file(path: str | Path, key: str) -> list:
    """Read a list option from its own file: the list itself, or a mapping holding `key`.

    TOML cannot hold a bare list, so there it is `key = [...]` (an array of tables).
    """
    data = read_structured_file(path, f"{key} file")
    if isinstance(data, dict) and set(data) == {key}:
        data = data[key]
    if not isinstance(data, list):
        raise ConfigError(
            f"{key} file {str(path)!r} must hold a list, or a mapping with the single key "
            f"{key!r}, got {type(data).__name__}"
        )
    if len(data) > MAX_LIST_ITEMS:
        raise ConfigError(
            f"{key} file {str(path)!r} has {len(data)} entries; at most {MAX_LIST_ITEMS} allowed"
        )
    return data
