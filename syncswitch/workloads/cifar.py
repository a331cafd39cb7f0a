"""Reader for local copies of CIFAR-10/100 in the official binary or python layouts.

Nothing is ever downloaded. The python layout is pickled, so it is read with an unpickler
that can only rebuild numpy arrays: a pickle names arbitrary callables to run, and a data
file from an untrusted source must not be able to execute code.

A data directory may come from elsewhere, so sizes are checked against the format before
anything is allocated: only regular files are read, no larger than the official files; a
binary file must be whole records; an array a pickle asks to rebuild may hold no more than
the largest official batch, and the images must be (N, 3072) uint8.

Work is bounded as well as memory: before unpickling, the pickle's opcodes are scanned (a
bounded number) and a container referenced twice (a shared or recursive structure: a few KB
can describe a list whose walk, or a tuple whose hash, never ends) is refused; the labels
must then be a flat list of at most one batch of integers (or a 1-D integer array).
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from syncswitch.errors import WorkloadError
from syncswitch.files import open_regular

_IMAGE_SHAPE = (3, 32, 32)
_IMAGE_BYTES = 3 * 32 * 32
# The largest official file holds 50,000 images (CIFAR-100's training set); a little room
# above it, and nothing near what a hostile file could otherwise ask for.
MAX_RECORDS_PER_FILE = 60_000
MAX_ARRAY_BYTES = MAX_RECORDS_PER_FILE * _IMAGE_BYTES
# Pickled batches carry the images plus labels, file names and pickle framing.
MAX_PICKLE_BYTES = MAX_ARRAY_BYTES + (32 << 20)
# Opcodes in one pickled batch: the official ones hold a few per label and file name (about
# 300,000 for CIFAR-100's training file).
MAX_PICKLE_OPCODES = 2_000_000


@dataclass(frozen=True)
class _Layout:
    title: str
    num_classes: int
    binary_dir: str
    binary_train: tuple[str, ...]
    binary_test: tuple[str, ...]
    # CIFAR-100 records start with a coarse and a fine label byte; the fine one is last.
    label_bytes: int
    python_dir: str
    python_train: tuple[str, ...]
    python_test: tuple[str, ...]
    label_key: str


_CIFAR10_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))

_LAYOUTS: dict[str, _Layout] = {
    "cifar10": _Layout(
        title="CIFAR-10",
        num_classes=10,
        binary_dir="cifar-10-batches-bin",
        binary_train=tuple(f"{b}.bin" for b in _CIFAR10_BATCHES),
        binary_test=("test_batch.bin",),
        label_bytes=1,
        python_dir="cifar-10-batches-py",
        python_train=_CIFAR10_BATCHES,
        python_test=("test_batch",),
        label_key="labels",
    ),
    "cifar100": _Layout(
        title="CIFAR-100",
        num_classes=100,
        binary_dir="cifar-100-binary",
        binary_train=("train.bin",),
        binary_test=("test.bin",),
        label_bytes=2,
        python_dir="cifar-100-python",
        python_train=("train",),
        python_test=("test",),
        label_key="fine_labels",
    ),
}


@dataclass(frozen=True, eq=False)
class CifarArrays:
    """Images as uint8 ``(N, 3, 32, 32)``, labels as int64 ``(N,)``."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


def read_cifar(name: str, data_dir: str | Path | None) -> CifarArrays:
    """Read ``name`` ("cifar10" or "cifar100") from ``data_dir``.

    ``data_dir`` may hold the extracted archive folder (e.g. ``cifar-10-batches-bin/``) or be
    that folder itself. The binary layout wins when both are present, as it needs no pickle.
    """
    layout = _LAYOUTS.get(name)
    if layout is None:
        raise WorkloadError(f"unknown CIFAR dataset {name!r}; allowed: {', '.join(_LAYOUTS)}")
    kind, folder = _locate(layout, data_dir)
    if kind == "binary":
        train = [_read_binary(folder / f, layout) for f in layout.binary_train]
        test = [_read_binary(folder / f, layout) for f in layout.binary_test]
    else:
        train = [_read_python(folder / f, layout) for f in layout.python_train]
        test = [_read_python(folder / f, layout) for f in layout.python_test]
    return CifarArrays(
        x_train=np.concatenate([x for x, _ in train]),
        y_train=np.concatenate([y for _, y in train]),
        x_test=np.concatenate([x for x, _ in test]),
        y_test=np.concatenate([y for _, y in test]),
        num_classes=layout.num_classes,
    )


def _locate(layout: _Layout, data_dir: str | Path | None) -> tuple[str, Path]:
    layouts = f"'{layout.binary_dir}/' (binary version) or '{layout.python_dir}/' (python version)"
    never = "syncswitch never downloads datasets"
    if data_dir is None:
        raise WorkloadError(f"{layout.title} needs a data directory holding {layouts}; {never}")
    root = Path(data_dir).expanduser()
    for kind, sub in (("binary", layout.binary_dir), ("python", layout.python_dir)):
        if (root / sub).is_dir():
            return kind, root / sub
        if root.name == sub and root.is_dir():
            return kind, root
    raise WorkloadError(f"{layout.title} not found in '{root}': expected {layouts} there; {never}")


def _open_data_file(path: Path, max_bytes: int) -> tuple[int, int]:
    """A descriptor of a regular data file no larger than `max_bytes`, and its size."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        raise WorkloadError(
            f"missing CIFAR file '{path}'; is the archive fully extracted?"
        ) from None
    except OSError as exc:
        raise WorkloadError(f"cannot read '{path}': {exc}") from None
    size = os.fstat(fd).st_size
    if size > max_bytes:
        os.close(fd)
        raise WorkloadError(
            f"'{path}' is {size} bytes, larger than any CIFAR file ({max_bytes} bytes at most); "
            "it is not a CIFAR batch"
        )
    return fd, size


def _read_binary(path: Path, layout: _Layout) -> tuple[np.ndarray, np.ndarray]:
    record = layout.label_bytes + _IMAGE_BYTES
    fd, size = _open_data_file(path, MAX_RECORDS_PER_FILE * record)
    if size == 0 or size % record:
        os.close(fd)
        raise WorkloadError(
            f"'{path}' is truncated or corrupt: {size} bytes is not a positive multiple "
            f"of the {record}-byte {layout.title} record"
        )
    try:
        with os.fdopen(fd, "rb") as handle:
            raw = np.frombuffer(handle.read(size), dtype=np.uint8)
    except OSError as exc:
        raise WorkloadError(f"cannot read '{path}': {exc}") from exc
    if raw.size != size:
        raise WorkloadError(f"'{path}' changed while it was read")
    rows = raw.reshape(-1, record)
    labels = rows[:, layout.label_bytes - 1].astype(np.int64)
    images = np.ascontiguousarray(rows[:, layout.label_bytes :]).reshape(-1, *_IMAGE_SHAPE)
    _check_labels(path, labels, layout.num_classes)
    return images, labels


def _read_python(path: Path, layout: _Layout) -> tuple[np.ndarray, np.ndarray]:
    fd, size = _open_data_file(path, MAX_PICKLE_BYTES)
    try:
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(size)
        _refuse_shared_containers(raw)
        batch = _ArrayOnlyUnpickler(io.BytesIO(raw)).load()
    except WorkloadError as exc:
        raise WorkloadError(f"refusing to load '{path}': {exc}") from None
    except Exception as exc:  # any unpickling failure means the file is unusable
        raise WorkloadError(
            f"'{path}' is truncated or corrupt ({type(exc).__name__}: {exc})"
        ) from exc
    if not isinstance(batch, dict):
        raise WorkloadError(f"'{path}' is not a CIFAR batch: expected a dict, got {type(batch)}")
    data = _get(batch, "data", path)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.size == 0:
        raise WorkloadError(f"'{path}' is corrupt: 'data' must be a non-empty uint8 array")
    if data.ndim != 2 or data.shape[1] != _IMAGE_BYTES:
        raise WorkloadError(
            f"'{path}' is corrupt: 'data' has shape {data.shape}; a CIFAR batch's is "
            f"(N, {_IMAGE_BYTES})"
        )
    images = np.ascontiguousarray(data).reshape(-1, *_IMAGE_SHAPE)
    labels = _flat_labels(_get(batch, layout.label_key, path), path, layout.label_key)
    if len(labels) != len(images):
        raise WorkloadError(f"'{path}' is corrupt: {len(images)} images but {len(labels)} labels")
    _check_labels(path, labels, layout.num_classes)
    return images, labels


def _flat_labels(value: Any, path: Path, key: str) -> np.ndarray:
    """The labels as int64 (N,): a flat list or tuple of at most one batch of integers, or a
    1-D integer array; anything nested is refused before it is walked."""
    bad = f"'{path}' is corrupt: bad '{key}'"
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "iu" or value.size > MAX_RECORDS_PER_FILE:
            raise WorkloadError(
                f"{bad}: a {value.dtype} array of shape {value.shape}; "
                f"it must be 1-D integers, at most {MAX_RECORDS_PER_FILE}"
            )
        return value.astype(np.int64)
    if not isinstance(value, (list, tuple)) or len(value) > MAX_RECORDS_PER_FILE:
        raise WorkloadError(f"{bad}: it must be a list of at most {MAX_RECORDS_PER_FILE} integers")
    if not all(type(v) is int for v in value):
        raise WorkloadError(f"{bad}: it must be a flat list of integers")
    try:
        return np.asarray(value, dtype=np.int64).reshape(-1)
    except OverflowError:
        raise WorkloadError(f"{bad}: a label is out of range") from None


_CONTAINER_OPS = frozenset(
    {
        "EMPTY_LIST",
        "LIST",
        "EMPTY_DICT",
        "DICT",
        "EMPTY_SET",
        "FROZENSET",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "EMPTY_TUPLE",
    }
)
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
# Opcodes that leave the object below their arguments on the stack (filled, not replaced).
_FILL_OPS = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"})


def _refuse_shared_containers(raw: bytes) -> None:
    """Scan the pickle's opcodes (at most MAX_PICKLE_OPCODES), following which stack entries
    are containers, and refuse a container fetched again from the memo: no CIFAR batch shares
    a list, tuple, set or dict, and a shared or recursive one lets a tiny file describe a
    structure that is never walked (or hashed) to its end."""
    stack: list[bool] = []  # True: a container
    marks: list[int] = []
    memo: dict[int, bool] = {}
    # A malformed opcode stream raises here (IndexError, ValueError) as the unpickler would:
    # the caller says "truncated or corrupt".
    for count, (opcode, arg, _pos) in enumerate(pickletools.genops(raw)):
        if count >= MAX_PICKLE_OPCODES:
            raise WorkloadError(
                f"it holds more than {MAX_PICKLE_OPCODES:,} pickle opcodes; a CIFAR batch "
                "holds a few per image"
            )
        name = opcode.name
        if name in _PUT_OPS:
            memo[len(memo) if name == "MEMOIZE" else _memo_index(arg)] = stack[-1]
            continue
        if name in _GET_OPS:
            if memo[_memo_index(arg)]:
                raise WorkloadError(
                    "it references one list, tuple, set or dict more than once (a shared "
                    "or recursive structure), which no CIFAR batch holds"
                )
            stack.append(False)
            continue
        if name == "MARK":
            marks.append(len(stack))
            continue
        before = opcode.stack_before
        if pickletools.markobject in before:
            del stack[marks.pop() :]
            before = before[: before.index(pickletools.markobject)]
        popped = stack[len(stack) - len(before) :] if before else []
        if len(popped) != len(before):
            raise ValueError(f"stack underflow at {name}")
        del stack[len(stack) - len(before) :]
        for _ in opcode.stack_after:
            stack.append(name in _CONTAINER_OPS or (name in _FILL_OPS and popped[0]))


def _memo_index(arg: Any) -> int:
    """A PUT's or GET's memo index (an int, or digits for the text opcodes)."""
    if arg is None:
        raise ValueError("a memo opcode without its index")
    return int(arg)


def _get(batch: dict[Any, Any], key: str, path: Path) -> Any:
    # The official files were pickled by Python 2 and load with bytes keys; a copy re-pickled
    # under Python 3 has str keys. Both hold the same data.
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    raise WorkloadError(f"'{path}' is not a CIFAR batch: it has no '{key}' entry")


def _check_labels(path: Path, labels: np.ndarray, num_classes: int) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise WorkloadError(
            f"'{path}' is corrupt: labels must lie in [0, {num_classes}), "
            f"found {labels.min()}..{labels.max()}"
        )


def _latin1_encode(text: object, encoding: object = "latin1") -> bytes:
    # Protocol-2 pickles written by Python 3 store bytes as _codecs.encode(str, "latin1");
    # only that exact use is honoured instead of exposing the whole codec machinery.
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise WorkloadError("the pickle calls _codecs.encode other than to rebuild bytes")
    return text.encode("latin-1")


class _Frozen:
    """Callable wrapper that a pickle's BUILD opcode cannot modify.

    BUILD applies attacker-chosen state to whatever object it is given, and setattr on a
    plain function (e.g. its __defaults__) would alter numpy for the rest of the process.
    """

    __slots__ = ("_fn",)

    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)

    def __setstate__(self, state: object) -> None:
        raise WorkloadError("the pickle tries to modify an array rebuilder")


class _NdarrayToken:
    """What the pickle gets for `numpy.ndarray`: a name for the class, not the class.

    Numpy pickles an array as `_reconstruct(ndarray, shape, dtype)`, so the class must be
    nameable; but the class itself is callable, and `ndarray((10**10,))` in a tiny pickle
    would allocate any size. Only `_bounded_reconstruct` turns the token into the class.
    """

    __slots__ = ()

    def __call__(self, *args: Any) -> Any:
        raise WorkloadError("the pickle calls numpy.ndarray directly, which no array needs")


_NDARRAY = _NdarrayToken()


def _checked_array_size(shape: Any, dtype: Any) -> None:
    """Refuse before allocation an array larger than the largest official CIFAR batch."""
    dims = (shape,) if isinstance(shape, int) else shape
    if not isinstance(dims, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise WorkloadError(f"the pickle asks for an array of shape {str(shape)[:60]}")
    n_bytes = int(np.prod(dims, dtype=object)) * np.dtype(dtype).itemsize
    if n_bytes > MAX_ARRAY_BYTES:
        raise WorkloadError(
            f"the pickle asks for an array of shape {str(dims)[:60]} ({n_bytes} bytes); a "
            f"CIFAR batch's largest holds {MAX_ARRAY_BYTES} bytes"
        )


def _numpy_rebuilders() -> dict[tuple[str, str], Any]:
    # Take the callables numpy itself pickles with instead of importing its private modules,
    # whose names differ between numpy 1.x (numpy.core) and 2.x (numpy._core).
    sample = np.zeros(1, dtype=np.uint8)
    # The reduce tuples' first items are numpy's rebuild functions (typed as str | callable).
    numpy_reconstruct: Any = sample.__reduce__()[0]
    numpy_frombuffer: Any = sample.__reduce_ex__(5)[0]

    def bounded_reconstruct(subtype: Any, shape: Any, dtype: Any) -> Any:
        if subtype is not _NDARRAY:
            raise WorkloadError("the pickle rebuilds something other than a numpy array")
        _checked_array_size(shape, dtype)
        return numpy_reconstruct(np.ndarray, shape, dtype)

    def bounded_frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> Any:
        _checked_array_size(shape, dtype)
        return numpy_frombuffer(buffer, dtype, shape, order)

    reconstruct = _Frozen(bounded_reconstruct)
    frombuffer = _Frozen(bounded_frombuffer)
    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): _NDARRAY,
        # A type is passed on unwrapped: BUILD on a type fails instead of changing it.
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _Frozen(_latin1_encode),
    }
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


_ALLOWED_GLOBALS = _numpy_rebuilders()


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickler whose only reachable globals are numpy's array and dtype rebuilders."""

    def __init__(self, handle: BinaryIO) -> None:
        super().__init__(handle, encoding="bytes")

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED_GLOBALS.get((module, name))
        if allowed is None:
            raise WorkloadError(
                f"it references {module}.{name}, but only numpy arrays may be rebuilt from a "
                "CIFAR file (it may be malicious or not a CIFAR batch)"
            )
        return allowed
