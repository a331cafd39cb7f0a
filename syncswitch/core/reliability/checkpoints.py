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

The plain-data rule lives in `plain`, the manifest and the verified read of both files in
`manifest`; their public names are importable from here too.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from syncswitch.core.reliability.manifest import (
    FORMAT,
    FORMAT_VERSION,
    MAX_MANIFEST_BYTES,
    CheckpointInfo,
    Refusal,
    RefusalKind,
    Refused,
    manifest_record,
    manifest_samples,
    read_verified,
)
from syncswitch.core.reliability.plain import MAX_DEPTH, PlainDataError, check_plain
from syncswitch.files import TMP_SUFFIX, fsync_directory, write_atomic

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointStore",
    "LoadedCheckpoint",
    "NoCheckpointError",
    "PlainDataError",
    "Refusal",
    "RefusalKind",
    "check_plain",
]

_NAME = re.compile(r"^checkpoint-(\d{6,})\.(pt|json)$")
_TMP_PREFIX = ".checkpoint-"
_LABEL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


class CheckpointError(Exception):
    """No checkpoint could be loaded; `refused` says what was tried and why it was refused."""

    def __init__(self, message: str, refused: list[Refusal] | None = None) -> None:
        super().__init__(message)
        self.refused: list[Refusal] = list(refused or [])


class NoCheckpointError(CheckpointError):
    """The directory holds no checkpoint at all (nothing to resume from, nothing refused)."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    state: dict[str, Any]
    info: CheckpointInfo
    refused: list[Refusal]  # newer checkpoints passed over on the way, newest first
    # What `validate` built of the state (e.g. a typed record), so it is parsed only once.
    contents: Any = None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- loading ----------------------------------------------------------------------------------


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
        manifest = manifest_record(info)
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

    def newest_samples(self) -> int | None:
        """The samples the newest checkpoint's manifest claims (-1 when it cannot tell), or
        None when there is no checkpoint; nothing is loaded or verified."""
        found = self.sequences()
        return manifest_samples(self._manifest_path(found[0])) if found else None

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
                if (
                    max_samples is not None
                    and manifest_samples(self._manifest_path(sequence)) > max_samples
                ):
                    continue
                state, info = self._load(sequence, max_bytes)
                contents = _validated(state, info.path, validate)
            except Refused as exc:
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

    def _load(
        self, sequence: int, max_bytes: int | None = None
    ) -> tuple[dict[str, Any], CheckpointInfo]:
        data_path = self._data_path(sequence)
        data, info = read_verified(sequence, data_path, self._manifest_path(sequence), max_bytes)
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
            raise Refused(data_path, kind, f"{words}: {detail}") from exc
        except Exception as exc:  # torch raises RuntimeError, EOFError, ... on foreign files
            text = str(exc).strip()
            detail = f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else repr(exc)
            raise Refused(
                data_path,
                RefusalKind.NOT_A_CHECKPOINT,
                f"not a checkpoint: torch.load cannot read it ({detail})",
            ) from exc
        try:
            check_plain(state)
        except PlainDataError as exc:
            raise Refused(data_path, RefusalKind.UNSAFE_CONTENT, f"unsafe content: {exc}") from exc
        return state, info


def _validated(
    state: dict[str, Any], path: Path, validate: Callable[[dict[str, Any]], Any] | None
) -> Any:
    if validate is None:
        return None
    try:
        return validate(state)
    except Exception as exc:  # the state is untrusted data; any failure to fit refuses it
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise Refused(path, RefusalKind.WRONG_CONTENTS, f"wrong contents: {detail}") from exc
