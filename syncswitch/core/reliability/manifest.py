"""A checkpoint's files: the manifest beside each data file, and reading both back verified.

    checkpoint-000007.pt    torch.save of the state (zip format)
    checkpoint-000007.json  manifest: file, sha256, bytes, samples, label, created time, format

The manifest is read as JSON (never pickled), and the data file's size and SHA-256 are checked
against it BEFORE any unpickling; only regular files are read, never through a symlink. The
hash guards against truncation and accidental change; it is not a signature, since anyone who
can write the directory can write a matching manifest (that case is what weights_only is for,
in `checkpoints`). Whatever is wrong with a checkpoint is raised as `Refused`, carrying the
`Refusal` that `load_latest` reports.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from syncswitch.files import UnsafeFileError, open_regular, read_regular

FORMAT = "syncswitch-checkpoint"
FORMAT_VERSION = 1
# A manifest is a few hundred bytes; one larger than this is not ours.
MAX_MANIFEST_BYTES = 1 << 20


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

    def to_plain(self) -> dict[str, Any]:
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


class Refused(Exception):
    """One checkpoint cannot be used; `refusal` says which and why."""

    def __init__(self, path: Path, kind: RefusalKind, reason: str) -> None:
        super().__init__(reason)
        self.refusal = Refusal(path, kind, reason)


def manifest_record(info: CheckpointInfo) -> dict[str, Any]:
    """The manifest written beside `info`'s data file (after it, so that it always describes a
    complete one)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "file": info.path.name,
        "sequence": info.sequence,
        "sha256": info.sha256,
        "bytes": info.bytes,
        "samples": info.samples,
        "label": info.label,
        "created_unix_s": info.created_unix_s,
        "meta": info.meta,
    }


def manifest_samples(manifest_path: Path) -> int:
    """Samples a manifest claims, or -1 when it cannot tell (then it is a candidate, and
    reading it reports what is wrong with it)."""
    try:
        raw = read_regular(manifest_path, MAX_MANIFEST_BYTES, follow_symlinks=False)
        samples = json.loads(raw).get("samples")
    except (OSError, ValueError, RecursionError, AttributeError):
        return -1
    return samples if type(samples) is int else -1


def read_verified(
    sequence: int, data_path: Path, manifest_path: Path, max_bytes: int | None = None
) -> tuple[bytes, CheckpointInfo]:
    """The data file's bytes, once its manifest reads and its size and SHA-256 match it."""
    if not manifest_path.exists() and not manifest_path.is_symlink():
        raise Refused(
            data_path,
            RefusalKind.MISSING_MANIFEST,
            "missing manifest: no "
            f"{manifest_path.name}, so its content cannot be verified (a save cut short?)",
        )
    info = read_manifest(sequence, data_path, manifest_path)
    if max_bytes is not None and info.bytes > max_bytes:
        raise Refused(
            data_path,
            RefusalKind.TOO_LARGE,
            f"too large: the manifest says {info.bytes} bytes; at most {max_bytes} fit this run",
        )
    data = read_data(data_path, manifest_path, info)
    digest = hashlib.sha256(data).hexdigest()
    if digest != info.sha256:
        raise Refused(
            data_path,
            RefusalKind.ALTERED,
            f"altered: sha256 {digest[:12]}... differs from the manifest's "
            f"{info.sha256[:12]}... (changed after it was written)",
        )
    return data, info


def read_data(data_path: Path, manifest_path: Path, info: CheckpointInfo) -> bytes:
    """The data file's bytes, read only if it is a regular file of the manifest's size."""
    try:
        fd = open_regular(data_path, follow_symlinks=False)
    except UnsafeFileError as exc:
        raise Refused(data_path, RefusalKind.NOT_A_FILE, f"not a file: {exc}") from exc
    except OSError as exc:  # absent, or removed by a prune since the listing
        raise Refused(
            data_path,
            RefusalKind.MISSING_DATA,
            f"missing data: {manifest_path.name} names {data_path.name}, which cannot be "
            f"read ({exc.strerror or exc})",
        ) from exc
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < info.bytes:
            raise Refused(
                data_path, RefusalKind.TRUNCATED, f"truncated: {size} of {info.bytes} bytes"
            )
        if size > info.bytes:
            raise Refused(
                data_path,
                RefusalKind.ALTERED,
                f"altered: {size} bytes, the manifest says {info.bytes}",
            )
        try:
            data = handle.read(info.bytes + 1)
        except OSError as exc:
            raise Refused(
                data_path,
                RefusalKind.MISSING_DATA,
                f"missing data: {data_path.name} cannot be read ({exc.strerror or exc})",
            ) from exc
    if len(data) != info.bytes:  # changed while it was being read
        raise Refused(
            data_path,
            RefusalKind.ALTERED,
            f"altered: {len(data)} bytes read, the manifest says {info.bytes}",
        )
    return data


def read_manifest(sequence: int, data_path: Path, manifest_path: Path) -> CheckpointInfo:
    def bad(why: str) -> Refused:
        return Refused(
            data_path, RefusalKind.BAD_MANIFEST, f"bad manifest: {manifest_path.name} {why}"
        )

    try:
        raw = read_regular(manifest_path, MAX_MANIFEST_BYTES, follow_symlinks=False)
    except UnsafeFileError as exc:
        raise Refused(data_path, RefusalKind.NOT_A_FILE, f"not a file: {exc}") from exc
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
        raise Refused(
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
