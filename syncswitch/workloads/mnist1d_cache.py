"""MNIST-1D's generated arrays, kept in a per-user cache: generating them is most of loading
the data (mnist1d's make_dataset transforms one sample at a time through scipy: seconds for
5,000 samples), reading them back takes milliseconds.

Where: `SYNCSWITCH_CACHE_DIR` when set (`off` turns the cache off), else the user's cache
directory (platformdirs: `~/.cache/syncswitch` on Linux); its `mnist1d/` folder holds one
uncompressed .npz per (samples, seed, mnist1d's version, `LAYOUT`), written atomically
(files.write_atomic: a reader sees a whole file or none).

Read back as untrusted input (another process, or another user with the same cache, may have
written it): a regular file no larger than the arrays asked for need; a zip whose members are
exactly the four arrays, each stored, not compressed (nothing to inflate); loaded without
pickle; each array of the dtype and shape the generator gives, finite, labels within the
classes. On any problem the caller generates the arrays again and the file is replaced. A
cache that cannot be written (a read-only home) is skipped silently: it only saves time.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np
import platformdirs

from syncswitch.files import UnsafeFileError, read_regular, write_atomic

ENV_VAR = "SYNCSWITCH_CACHE_DIR"
OFF = "off"
LAYOUT = 1  # this file's layout; a change makes earlier files unread (another name)
CLASSES = 10
SEQUENCE_LENGTH = 40  # mnist1d's final_seq_length
TRAIN_SPLIT = 0.8  # mnist1d's train_split
ZIP_OVERHEAD_BYTES = 64 * 1024  # headers of four members and their .npy headers, with room
# What the file holds: (name, dtype), in the order written.
MEMBERS = (("x_train", "<f4"), ("y_train", "<i8"), ("x_test", "<f4"), ("y_test", "<i8"))

Arrays = dict[str, np.ndarray]


def cached(num_samples: int, seed: int, generate: Callable[[], Arrays]) -> Arrays:
    """The arrays for (num_samples, seed): read from the cache, else `generate()`d and kept."""
    path = cache_path(num_samples, seed)
    if path is not None:
        arrays = read(path, num_samples)
        if arrays is not None:
            return arrays
    arrays = generate()
    if path is not None and checked(arrays, num_samples) is not None:
        store(path, arrays)
    return arrays


def cache_dir() -> Path | None:
    given = os.environ.get(ENV_VAR, "").strip()
    if given.lower() == OFF:
        return None
    return Path(given or platformdirs.user_cache_dir("syncswitch")).expanduser() / "mnist1d"


def cache_path(num_samples: int, seed: int) -> Path | None:
    directory = cache_dir()
    if directory is None:
        return None
    try:
        version = metadata.version("mnist1d")
    except metadata.PackageNotFoundError:
        version = "unknown"
    safe_version = "".join(c if c.isalnum() or c in ".-" else "_" for c in version)
    return directory / f"mnist1d-{safe_version}-n{num_samples}-seed{seed}-v{LAYOUT}.npz"


def shapes(num_samples: int) -> dict[str, tuple[int, ...]]:
    """The arrays' shapes for `num_samples` (make_dataset draws num_samples // 10 per class)."""
    total = (num_samples // CLASSES) * CLASSES
    train = int(total * TRAIN_SPLIT)
    return {
        "x_train": (train, 1, SEQUENCE_LENGTH),
        "y_train": (train,),
        "x_test": (total - train, 1, SEQUENCE_LENGTH),
        "y_test": (total - train,),
    }


def max_bytes(num_samples: int) -> int:
    wanted = shapes(num_samples)
    arrays = sum(int(np.prod(wanted[name])) * np.dtype(dtype).itemsize for name, dtype in MEMBERS)
    return arrays + ZIP_OVERHEAD_BYTES


def read(path: Path, num_samples: int) -> Arrays | None:
    """The cached arrays, or None when the file is absent or not exactly what it should be."""
    limit = max_bytes(num_samples)
    try:
        data = read_regular(path, limit)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            names = sorted(member.filename for member in members)
            if names != sorted(f"{name}.npy" for name, _ in MEMBERS):
                return None
            if any(m.compress_type != zipfile.ZIP_STORED or m.file_size > limit for m in members):
                return None
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name, _ in MEMBERS}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnsafeFileError):
        return None  # unreadable, too large, not an npz, an object array: generate again
    return checked(arrays, num_samples)


def checked(arrays: Arrays, num_samples: int) -> Arrays | None:
    """`arrays` if they are what the generator gives for `num_samples`, else None."""
    wanted = shapes(num_samples)
    for name, dtype in MEMBERS:
        array = arrays.get(name)
        if not isinstance(array, np.ndarray) or array.dtype != np.dtype(dtype):
            return None
        if array.shape != wanted[name]:
            return None
    if not (np.isfinite(arrays["x_train"]).all() and np.isfinite(arrays["x_test"]).all()):
        return None
    for labels in (arrays["y_train"], arrays["y_test"]):
        if labels.size and (labels.min() < 0 or labels.max() >= CLASSES):
            return None
    return {name: np.ascontiguousarray(arrays[name]) for name, _ in MEMBERS}


def store(path: Path, arrays: Arrays) -> None:
    """Write the arrays atomically; a cache that cannot be written is left alone."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        x_train=arrays["x_train"],
        y_train=arrays["y_train"],
        x_test=arrays["x_test"],
        y_test=arrays["y_test"],
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, buffer.getvalue(), tmp_prefix=".mnist1d-")
    except OSError:
        pass  # read-only or full: the next run generates again
