"""Checkpoints that are never half-written and never execute code when loaded.

A checkpoint is a dict of plain data: torch tensors, str, int, float, bool, None, and lists,
tuples and str-keyed dicts of those. `check_plain` enforces this before saving and again after
loading, with the exact path of any offending entry. Plain data is what
`torch.load(weights_only=True)` rebuilds without calling any Python code; anything richer
(a deque, a numpy array, an enum member, a dataclass) would either fail to load under
weights_only or tempt someone to load with weights_only=False, which runs whatever the file says.

On disk, `CheckpointStore` keeps numbered pairs in one directory:

    checkpoint-000007.pt    torch.save of the state (zip format)
    checkpoint-000007.json  manifest: file, sha256, bytes, samples, label, created time, format

Writing: the data file is written to a temporary file in the same directory, flushed, fsynced
and renamed into place (os.replace is atomic on POSIX within one file system), then the
directory is fsynced so the rename itself survives a power cut. The manifest is written the
same way AFTER the data, so a manifest always describes a complete data file: a crash between
the two leaves a data file without a manifest, which loading refuses ("missing manifest") and
falls back past. Older checkpoints are deleted only once the new pair is on disk, and the
newest `keep` (>= 2) are kept, so the previous one is always there to fall back to.

Loading: the manifest is read as JSON (never pickled), the data file's size and SHA-256 are
checked against it BEFORE any unpickling, the verified bytes (not a second read of the file)
go to torch.load(weights_only=True, map_location="cpu"), and the result is checked with
`check_plain`. The hash guards against truncation and accidental change; it is not a
signature, since anyone who can write the directory can write a matching manifest. That case
is what weights_only is for: a file with a code-execution payload and a correct hash is still
refused and its payload never runs.

Only regular files are read, never through a symlink, and the directory itself must not be
a symlink: a run directory may come from elsewhere, and a FIFO planted as a checkpoint would
block the reader forever, a link would make it read (or prune) files outside the run. A
caller may bound the data file's size and check the loaded state's structure (`validate`); a
checkpoint failing either is refused like a damaged one, and the previous one is tried.

One store writes to one directory; two writers on the same directory would race on numbering.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from syncswitch.files import (
    TMP_SUFFIX,
    UnsafeFileError,
    fsync_directory,
    open_regular,
    read_regular,
    write_atomic,
)

FORMAT = "syncswitch-checkpoint"
FORMAT_VERSION = 1
_NAME = re.compile(r"^checkpoint-(\d{6,})\.(pt|json)$")
_TMP_PREFIX = ".checkpoint-"
# Deeper than any real state; a deeper structure is almost surely a cycle or a mistake, and
# refusing it early beats a RecursionError from inside the pickler.
MAX_DEPTH = 64
_LABEL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
# A manifest is a few hundred bytes; one larger than this is not ours.
MAX_MANIFEST_BYTES = 1 << 20
_SCALARS = (str, int, float, bool, type(None))


class CheckpointError(Exception):
    """No checkpoint could be loaded; `refused` says what was tried and why it was refused."""

    def __init__(self, message: str, refused: list[Refusal] | None = None) -> None:
        super().__init__(message)
        self.refused: list[Refusal] = list(refused or [])


class NoCheckpointError(CheckpointError):
    """The directory holds no checkpoint at all (nothing to resume from, nothing refused)."""


class PlainDataError(TypeError):
    """A state holds something other than tensors and plain data."""


class RefusalKind(StrEnum):
    MISSING_MANIFEST = "missing_manifest"  # data file without manifest (e.g. crash mid-save)
    BAD_MANIFEST = "bad_manifest"  # manifest unreadable or not one of ours
    NEWER_FORMAT = "newer_format"  # written by a newer version of this code
    MISSING_DATA = "missing_data"  # manifest without its data file
    TRUNCATED = "truncated"  # data file shorter than the manifest says
    ALTERED = "altered"  # size or SHA-256 differs from the manifest
    NOT_A_CHECKPOINT = "not_a_checkpoint"  # hash matches but torch.load cannot read it
    UNSAFE_CONTENT = "unsafe_content"  # would need code execution, or is not plain data
    NOT_A_FILE = "not_a_file"  # a symlink, FIFO, device or directory where a file should be
    TOO_LARGE = "too_large"  # larger than the caller allows for this run
    WRONG_CONTENTS = "wrong_contents"  # plain data, but not a state this run can continue from


class Refusal(NamedTuple):
    """One checkpoint that load_latest passed over."""

    path: Path
    kind: RefusalKind
    reason: str  # one line, starts with the kind in words, e.g. "truncated: 512 of 4096 bytes"


@dataclass(frozen=True)
class CheckpointInfo:
    """What a manifest says about one checkpoint."""

    sequence: int  # increases by one per save in this directory
    path: Path  # the data file
    manifest_path: Path
    sha256: str
    bytes: int
    samples: int  # training samples applied when it was taken
    label: str  # why it was taken: "periodic", "final", "switch", ...
    created_unix_s: float
    format_version: int = FORMAT_VERSION
    meta: dict[str, Any] = field(default_factory=dict)  # small JSON facts given to save()

    def to_record(self) -> dict[str, Any]:
        """For events.jsonl and summary.json."""
        return {
            "file": self.path.name,
            "sequence": self.sequence,
            "samples": self.samples,
            "label": self.label,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "created_unix_s": round(self.created_unix_s, 3),
            "meta": dict(self.meta),
        }


@dataclass(frozen=True)
class LoadedCheckpoint:
    state: dict[str, Any]
    info: CheckpointInfo
    refused: list[Refusal]  # newer checkpoints passed over on the way, newest first
    # What `validate` built of the state (e.g. a typed record), so it is parsed only once.
    contents: Any = None


# -- plain data ------------------------------------------------------------------------------


def _hint(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "; convert it with torch.from_numpy(a) or a.tolist()"
    if isinstance(value, np.generic):
        return "; convert it with .item()"
    if isinstance(value, torch.Tensor):
        return "; store a plain dense tensor (e.g. t.detach().clone())"
    if isinstance(value, str | int | float):
        base = next(t for t in (bool, str, int, float) if isinstance(value, t))
        return f" (a {base.__name__} subclass); store {base.__name__}(x) instead"
    if isinstance(value, set | frozenset):
        return "; store a sorted list"
    if isinstance(value, Mapping):
        return "; store dict(x) with str keys"
    if hasattr(value, "__iter__"):
        return "; store list(x)"
    return ""


def _type_name(value: Any) -> str:
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _refuse(path: str, value: Any) -> PlainDataError:
    return PlainDataError(
        f"{path} is a {_type_name(value)}; checkpoints hold tensors and plain data only "
        f"(str, int, float, bool, None, and lists, tuples and str-keyed dicts of them)"
        f"{_hint(value)}"
    )


def check_plain(state: Any, name: str = "state") -> None:
    """Raise PlainDataError naming the first entry that is not a tensor or plain data.

    Types are matched exactly, not by isinstance: a StrEnum member, a numpy float64 or an
    OrderedDict passes isinstance(str/float/dict) yet pickles as a reference to its class,
    which weights_only refuses to load (and which would run code on a trusting load).
    """
    if type(state) is not dict:
        raise PlainDataError(f"{name} is a {_type_name(state)}; a checkpoint must be a dict")
    _check(state, name, depth=0, ancestors=set())


def _check(value: Any, path: str, depth: int, ancestors: set[int]) -> None:
    kind = type(value)
    if kind in _SCALARS:
        return
    if kind is torch.Tensor:
        if value.layout is not torch.strided:
            raise PlainDataError(
                f"{path} is a {value.layout} tensor; checkpoints hold dense tensors only "
                f"(convert with .to_dense())"
            )
        return
    if kind not in (dict, list, tuple):
        raise _refuse(path, value)
    if depth >= MAX_DEPTH:
        raise PlainDataError(f"{path} is nested deeper than {MAX_DEPTH} levels; allowed up to that")
    if id(value) in ancestors:
        raise PlainDataError(f"{path} contains itself; checkpoints must be trees, not cycles")
    ancestors.add(id(value))
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise PlainDataError(
                    f"{path} has key {key!r} of type {_type_name(key)}; checkpoint dict keys "
                    f"must be str (convert e.g. optimizer state keys with str())"
                )
            _check(item, f"{path}[{key!r}]", depth + 1, ancestors)
    else:
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth + 1, ancestors)
    ancestors.discard(id(value))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- files ------------------------------------------------------------------------------------


def _unpickler_detail(message: str) -> str:
    """The informative part of torch's long weights_only error, which is mostly boilerplate.

    Its advice (load with weights_only=False, or allowlist the global) is exactly what must not
    be done with an untrusted file, so it is cut.
    """
    if "WeightsUnpickler error:" in message:
        message = message.split("WeightsUnpickler error:", 1)[1]
    boilerplate = ("Weights only load failed", "Check the documentation", "(1)", "(2)", "Please")
    lines = [line.strip() for line in message.splitlines()]
    lines = [line for line in lines if line and not line.startswith(boilerplate)]
    detail = lines[0] if lines else "refused by the weights_only unpickler"
    detail = detail.split(" Please use", 1)[0]
    return detail if len(detail) <= 200 else detail[:197] + "..."


class CheckpointStore:
    """Numbered, hashed, atomically written checkpoints in one directory."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 2:
            raise ValueError(
                f"keep={keep}: must be >= 2, so the previous checkpoint is there to fall back "
                f"to when the newest is damaged"
            )
        self.directory = Path(directory)
        self.keep = keep

    # -- writing -----------------------------------------------------------------------------

    def save(
        self,
        state: dict[str, Any],
        *,
        samples: int,
        label: str = "periodic",
        meta: Mapping[str, Any] | None = None,
    ) -> CheckpointInfo:
        """Write `state` as the newest checkpoint and prune beyond `keep`; returns its info.

        `meta` is a few JSON facts copied into the manifest (e.g. progress, version, protocol)
        so a listing or a resume message needs no unpickling. A tensor is saved with its whole
        storage, so clone a slice of a larger buffer (t[a:b].clone()) rather than save a view.
        """
        check_plain(state)
        if type(samples) is not int or samples < 0:
            raise ValueError(f"checkpoint samples {samples!r} must be an int >= 0")
        if type(label) is not str or not _LABEL.match(label):
            raise ValueError(
                f"checkpoint label {label!r} must be 1-32 of a-z, 0-9, '_', '-' "
                f"(e.g. 'periodic', 'final')"
            )
        meta_plain = dict(meta or {})
        try:
            json.dumps(meta_plain, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"checkpoint meta {_short(meta_plain)} must be plain JSON: {exc}"
            ) from exc

        self._refuse_symlinked_directory()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_temp_files()
        # Serialising to memory first costs one extra copy of the state, and buys one write
        # and a hash of exactly the bytes written.
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        sequence = self._next_sequence()
        info = CheckpointInfo(
            sequence=sequence,
            path=self._data_path(sequence),
            manifest_path=self._manifest_path(sequence),
            sha256=hashlib.sha256(data).hexdigest(),
            bytes=len(data),
            samples=samples,
            label=label,
            created_unix_s=time.time(),
            meta=meta_plain,
        )
        write_atomic(info.path, data, tmp_prefix=_TMP_PREFIX)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "file": info.path.name,
            "sequence": sequence,
            "sha256": info.sha256,
            "bytes": info.bytes,
            "samples": samples,
            "label": label,
            "created_unix_s": info.created_unix_s,
            "meta": meta_plain,
        }
        write_atomic(
            info.manifest_path, json.dumps(manifest, indent=2) + "\n", tmp_prefix=_TMP_PREFIX
        )
        self._prune()
        return info

    # -- reading -----------------------------------------------------------------------------

    def sequences(self) -> list[int]:
        """Sequence numbers present (data file, manifest or both), newest first."""
        if not self.directory.is_dir():
            return []
        found = set()
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match:
                found.add(int(match.group(1)))
        return sorted(found, reverse=True)

    def load_latest(
        self,
        *,
        max_samples: int | None = None,
        max_bytes: int | None = None,
        validate: Callable[[dict[str, Any]], Any] | None = None,
    ) -> LoadedCheckpoint:
        """The newest checkpoint that verifies and loads cleanly; older ones as fallback.

        With `max_samples`, only checkpoints taken at or before that many samples count (a
        rollback wants one from before the loss began to rise); newer ones are skipped, not
        refused, and not loaded. A data file larger than `max_bytes` is refused before it is
        read; `validate(state)` may raise (ValueError, KeyError, TypeError, ...) to refuse a
        state whose structure does not fit the caller, and what it returns is kept as the
        loaded checkpoint's `contents`. Raises NoCheckpointError when there is
        no candidate at all, and CheckpointError (one line naming each refused file and why)
        when every candidate was refused.
        """
        self._refuse_symlinked_directory()
        refused: list[Refusal] = []
        for sequence in self.sequences():
            try:
                if max_samples is not None and self._manifest_samples(sequence) > max_samples:
                    continue
                state, info = self._load(sequence, max_bytes)
                contents = _validated(state, info.path, validate)
            except _Refused as exc:
                refused.append(exc.refusal)
                continue
            return LoadedCheckpoint(state=state, info=info, refused=refused, contents=contents)
        if not refused:
            within = f" taken at or before {max_samples} samples" if max_samples is not None else ""
            raise NoCheckpointError(f"no checkpoint{within} in {self.directory}")
        listing = "; ".join(f"{r.path.name}: {r.reason}" for r in refused)
        raise CheckpointError(
            f"no valid checkpoint in {self.directory} ({len(refused)} refused): {listing}",
            refused,
        )

    # -- internals ---------------------------------------------------------------------------

    def _data_path(self, sequence: int) -> Path:
        return self.directory / f"checkpoint-{sequence:06d}.pt"

    def _manifest_path(self, sequence: int) -> Path:
        return self.directory / f"checkpoint-{sequence:06d}.json"

    def _next_sequence(self) -> int:
        found = self.sequences()
        return found[0] + 1 if found else 1

    def _prune(self) -> None:
        for sequence in self.sequences()[self.keep :]:
            # Manifest first: a crash in between leaves an orphan data file, which loading
            # refuses as "missing manifest" and the next prune removes.
            self._manifest_path(sequence).unlink(missing_ok=True)
            self._data_path(sequence).unlink(missing_ok=True)
        fsync_directory(self.directory)

    def _refuse_symlinked_directory(self) -> None:
        if self.directory.is_symlink():
            raise CheckpointError(
                f"{self.directory} is a symbolic link; a run's checkpoint directory must be a "
                "directory inside it"
            )

    def _remove_temp_files(self) -> None:
        """Leftovers of a save that crashed before its rename (never a complete checkpoint)."""
        for entry in self.directory.glob(f"{_TMP_PREFIX}*{TMP_SUFFIX}"):
            entry.unlink(missing_ok=True)

    def _manifest_samples(self, sequence: int) -> int:
        """Samples a manifest claims, or -1 when it cannot tell (then it is a candidate, and
        `_load` reports what is wrong with it)."""
        manifest_path = self._manifest_path(sequence)
        try:
            raw = read_regular(manifest_path, MAX_MANIFEST_BYTES, follow_symlinks=False)
            samples = json.loads(raw).get("samples")
        except (OSError, ValueError, RecursionError, AttributeError):
            return -1
        return samples if type(samples) is int else -1

    def _load(
        self, sequence: int, max_bytes: int | None = None
    ) -> tuple[dict[str, Any], CheckpointInfo]:
        data_path = self._data_path(sequence)
        manifest_path = self._manifest_path(sequence)
        if not manifest_path.exists() and not manifest_path.is_symlink():
            raise _Refused(
                data_path,
                RefusalKind.MISSING_MANIFEST,
                "missing manifest: no "
                f"{manifest_path.name}, so its content cannot be verified (a save cut short?)",
            )
        info = self._read_manifest(sequence, data_path, manifest_path)
        if max_bytes is not None and info.bytes > max_bytes:
            raise _Refused(
                data_path,
                RefusalKind.TOO_LARGE,
                f"too large: the manifest says {info.bytes} bytes; at most {max_bytes} fit "
                "this run",
            )
        data = self._read_data(data_path, manifest_path, info)
        digest = hashlib.sha256(data).hexdigest()
        if digest != info.sha256:
            raise _Refused(
                data_path,
                RefusalKind.ALTERED,
                f"altered: sha256 {digest[:12]}... differs from the manifest's "
                f"{info.sha256[:12]}... (changed after it was written)",
            )
        # Only now, with the bytes verified, does anything unpickle them, and then only
        # through torch's restricted unpickler: tensors and plain containers, no code.
        try:
            state = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except pickle.UnpicklingError as exc:
            detail = _unpickler_detail(str(exc))
            kind = (
                RefusalKind.UNSAFE_CONTENT
                if "global" in detail.lower()
                else RefusalKind.NOT_A_CHECKPOINT
            )
            words = "unsafe content" if kind is RefusalKind.UNSAFE_CONTENT else "not a checkpoint"
            raise _Refused(data_path, kind, f"{words}: {detail}") from exc
        except Exception as exc:  # torch raises RuntimeError, EOFError, ... on foreign files
            text = str(exc).strip()
            detail = f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else repr(exc)
            raise _Refused(
                data_path,
                RefusalKind.NOT_A_CHECKPOINT,
                f"not a checkpoint: torch.load cannot read it ({detail})",
            ) from exc
        try:
            check_plain(state)
        except PlainDataError as exc:
            raise _Refused(data_path, RefusalKind.UNSAFE_CONTENT, f"unsafe content: {exc}") from exc
        return state, info

    @staticmethod
    def _read_data(data_path: Path, manifest_path: Path, info: CheckpointInfo) -> bytes:
        """The data file's bytes, read only if it is a regular file of the manifest's size."""
        try:
            fd = open_regular(data_path, follow_symlinks=False)
        except UnsafeFileError as exc:
            raise _Refused(data_path, RefusalKind.NOT_A_FILE, f"not a file: {exc}") from exc
        except OSError as exc:  # absent, or removed by a prune since the listing
            raise _Refused(
                data_path,
                RefusalKind.MISSING_DATA,
                f"missing data: {manifest_path.name} names {data_path.name}, which cannot be "
                f"read ({exc.strerror or exc})",
            ) from exc
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < info.bytes:
                raise _Refused(
                    data_path, RefusalKind.TRUNCATED, f"truncated: {size} of {info.bytes} bytes"
                )
            if size > info.bytes:
                raise _Refused(
                    data_path,
                    RefusalKind.ALTERED,
                    f"altered: {size} bytes, the manifest says {info.bytes}",
                )
            try:
                data = handle.read(info.bytes + 1)
            except OSError as exc:
                raise _Refused(
                    data_path,
                    RefusalKind.MISSING_DATA,
                    f"missing data: {data_path.name} cannot be read ({exc.strerror or exc})",
                ) from exc
        if len(data) != info.bytes:  # changed while it was being read
            raise _Refused(
                data_path,
                RefusalKind.ALTERED,
                f"altered: {len(data)} bytes read, the manifest says {info.bytes}",
            )
        return data

    def _read_manifest(self, sequence: int, data_path: Path, manifest_path: Path) -> CheckpointInfo:
        def bad(why: str) -> _Refused:
            return _Refused(
                data_path, RefusalKind.BAD_MANIFEST, f"bad manifest: {manifest_path.name} {why}"
            )

        try:
            raw = read_regular(manifest_path, MAX_MANIFEST_BYTES, follow_symlinks=False)
        except UnsafeFileError as exc:
            raise _Refused(data_path, RefusalKind.NOT_A_FILE, f"not a file: {exc}") from exc
        except OSError as exc:
            raise bad(f"cannot be read ({exc.strerror or exc})") from exc
        try:
            manifest = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            raise bad(f"is not readable JSON ({' '.join(str(exc).split())[:120]})") from exc
        if type(manifest) is not dict or manifest.get("format") != FORMAT:
            raise bad(f"is not a {FORMAT} manifest")
        version = manifest.get("format_version")
        if type(version) is not int or version < 1:
            raise bad(f"has format_version {version!r}; allowed: an int from 1")
        if version > FORMAT_VERSION:
            raise _Refused(
                data_path,
                RefusalKind.NEWER_FORMAT,
                f"newer format: version {version}, this code reads up to {FORMAT_VERSION}",
            )
        # The manifest's own "file" must be the name we derived: a manifest never chooses
        # which file gets read.
        if manifest.get("file") != data_path.name:
            raise bad(f"names file {manifest.get('file')!r}, expected {data_path.name!r}")
        sha = manifest.get("sha256")
        size = manifest.get("bytes")
        samples = manifest.get("samples")
        created = manifest.get("created_unix_s")
        label = manifest.get("label")
        meta = manifest.get("meta", {})
        if type(sha) is not str or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise bad(f"has sha256 {sha!r}; expected 64 lowercase hex digits")
        if type(size) is not int or size < 0:
            raise bad(f"has bytes {size!r}; expected an int >= 0")
        if type(samples) is not int or samples < 0:
            raise bad(f"has samples {samples!r}; expected an int >= 0")
        if not isinstance(created, int | float) or isinstance(created, bool):
            raise bad(f"has created_unix_s {created!r}; expected a number")
        if not math.isfinite(created):
            raise bad(f"has created_unix_s {created!r}; expected a number")
        if type(label) is not str or type(meta) is not dict:
            raise bad("has a label that is not a str or meta that is not an object")
        return CheckpointInfo(
            sequence=sequence,
            path=data_path,
            manifest_path=manifest_path,
            sha256=sha,
            bytes=size,
            samples=samples,
            label=label,
            created_unix_s=float(created),
            format_version=version,
            meta=meta,
        )


def _validated(
    state: dict[str, Any], path: Path, validate: Callable[[dict[str, Any]], Any] | None
) -> Any:
    if validate is None:
        return None
    try:
        return validate(state)
    except Exception as exc:  # the state is untrusted data; any failure to fit refuses it
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise _Refused(path, RefusalKind.WRONG_CONTENTS, f"wrong contents: {detail}") from exc


class _Refused(Exception):
    def __init__(self, path: Path, kind: RefusalKind, reason: str) -> None:
        super().__init__(reason)
        self.refusal = Refusal(path, kind, reason)
