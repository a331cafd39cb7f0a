"""Shared memory between a worker and a server on the same machine: the values of its
requests and replies are written there instead of through the socket.

Why: at 16.9M parameters a message over loopback TCP cost 37 ms of the server's one thread
(the kernel copies the 67 MB in and out, in small pieces), eight of them per BSP round of four
workers, while a plain copy of the same bytes costs about 8 ms (docs/large-models.md). The
socket still carries every header, so the order of messages, the waiting, the token and the
probing are exactly as before; only the values move through memory.

A worker creates one segment, `/dev/shm/syncswitch-<12 hex>`, readable by its own user only,
and offers each server its slice of it (the name, a random nonce written at its start, the
slice's offset and the segment's size) after the token. A server maps it only if the name
has that form, the file is a regular file of this user of exactly the size offered, the
slice is its shard's size and lies inside, and the nonce matches (the same memory, not a
same-named file on another machine); it answers whether it attached. Otherwise both ends use
the socket. The worker removes the name once every server has answered.

The segment holds two regions of the whole flat vector in the wire's dtype: the requests'
values (the worker writes them before it sends the headers) and the replies' weights (each
server writes its slice before it sends the reply's header). With float32 on the wire the
worker's model computes in them (runtime/ray/worker.py): its parameters are views of the
reply region and its gradient of the request region, so neither crossing copies on its side.
Neither side writes a region while the other may read it: a worker writes its next request
only after every server answered the last, and the synchronizer releases (answers) a worker
only once its message's values were folded into a sum or applied (core/sync/barrier_sum.py),
so the server never reads a region after its answer. A mapping is unmapped when the last
array viewing it is gone.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import stat
import struct
from dataclasses import dataclass

import numpy as np

from syncswitch.core.sync.wire_dtype import WireDtype
from syncswitch.runtime.dataplane.wire import REQUEST

SHM_DIR = "/dev/shm"
_NAME = re.compile(r"syncswitch-[0-9a-f]{12}")
NONCE_BYTES = 16
_ALIGN = 64  # each region starts on a cache line
# After the token, a u32 length of ATTACH_MARK introduces an offer instead of a request (no
# request can announce that many bytes: values_length refuses it).
ATTACH_MARK = 0xFFFF_FFFF
# nonce, name (ASCII, NUL-padded), the slice's offset and the segment's size in values,
# padded to the size of a request's header, so that an offer is read as one.
_OFFER = "<16s24sQQ"
ATTACH = struct.Struct(f"{_OFFER}{REQUEST.size - struct.calcsize(_OFFER)}x")
_MAX_VALUES = 1 << 40  # an offered size beyond any model (and any /dev/shm)


def shared_memory_wanted() -> bool:
    """Whether workers offer shared memory: yes, unless SYNCSWITCH_DATAPLANE=socket (to
    compare the two transports, or where /dev/shm is too small for two copies of the model
    per worker)."""
    return os.environ.get("SYNCSWITCH_DATAPLANE", "") != "socket"


def _round_up(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def segment_bytes(values: int, dtype: WireDtype) -> int:
    """The size of a segment for `values` values each way."""
    return _ALIGN + 2 * _round_up(values * dtype.itemsize)


@dataclass(frozen=True)
class SharedRegions:
    """A slice of a segment's two regions, as raw arrays of the wire's dtype."""

    request: np.ndarray
    reply: np.ndarray

    @classmethod
    def mapped(
        cls, memory: mmap.mmap, total: int, dtype: WireDtype, offset: int = 0, count: int = -1
    ) -> SharedRegions:
        """The slice of `count` values (all from `offset` if negative) of a segment of
        `total` values each way."""
        count = total - offset if count < 0 else count
        region = _round_up(total * dtype.itemsize)
        start = _ALIGN + offset * dtype.itemsize
        return cls(
            np.frombuffer(memory, dtype.raw_numpy, count, offset=start),
            np.frombuffer(memory, dtype.raw_numpy, count, offset=start + region),
        )

    def __getitem__(self, part: slice) -> SharedRegions:
        return SharedRegions(self.request[part], self.reply[part])


class WorkerSegment:
    """A worker's segment for `total` values each way; `offer` a server its slice of it."""

    def __init__(self, total: int, dtype: WireDtype) -> None:
        self.name = f"syncswitch-{secrets.token_hex(6)}"
        self.path = os.path.join(SHM_DIR, self.name)
        self.total = total
        self._nonce = secrets.token_bytes(NONCE_BYTES)
        size = segment_bytes(total, dtype)
        descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            # Reserved now, not on first touch: a /dev/shm too small for it (a container's
            # 64 MB default) fails here, and the socket is used, instead of a SIGBUS later.
            os.posix_fallocate(descriptor, 0, size)
            memory = mmap.mmap(descriptor, size)
        except BaseException:
            self.forget()
            raise
        finally:
            os.close(descriptor)
        memory[:NONCE_BYTES] = self._nonce
        self.regions = SharedRegions.mapped(memory, total, dtype)

    def offer(self, offset: int) -> bytes:
        """The attach record for the slice starting `offset` values in."""
        return ATTACH.pack(self._nonce, self.name.encode("ascii"), offset, self.total)

    def forget(self) -> None:
        """Remove the name: every server has attached or declined (or the worker failed)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class Declined(Exception):
    """Why a server did not attach a worker's offer (the socket carries the values then)."""


def attach(offer: bytes, count: int, dtype: WireDtype) -> SharedRegions:
    """The server's side: map the slice of `count` values that `offer` names, after checking
    it (see the module docstring). Raises Declined, saying why."""
    nonce, raw_name, offset, total = ATTACH.unpack(offer)
    name = raw_name.rstrip(b"\0").decode("ascii", errors="replace")
    if not _NAME.fullmatch(name):
        raise Declined("not a segment name")
    if not (count <= total <= _MAX_VALUES and offset <= total - count):
        raise Declined(f"a slice of {count} at {offset} does not fit {total} values")
    path = os.path.join(SHM_DIR, name)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:  # on another machine, or gone
        raise Declined(f"cannot open: {error.strerror}") from None
    try:
        info = os.fstat(descriptor)
        size = segment_bytes(total, dtype)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise Declined("not a file of this user")
        if info.st_size != size:
            raise Declined(f"{info.st_size} bytes, not {size}")
        memory = mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)
    if not secrets.compare_digest(memory[:NONCE_BYTES], nonce):
        raise Declined("another segment of that name")
    return SharedRegions.mapped(memory, total, dtype, offset, count)
