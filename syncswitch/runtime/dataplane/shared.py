"""Shared memory between a worker and a server on the same machine: the values of its
requests and replies are written there instead of through the socket.

Why: at 16.9M parameters a message over loopback TCP cost 37 ms of the server's one thread
(the kernel copies the 67 MB in and out, in small pieces), eight of them per BSP round of four
workers, while a plain copy of the same bytes costs about 8 ms (docs/large-models.md). The
socket still carries every header, so the order of messages, the waiting, the token and the
probing are exactly as before; only the values move through memory.

A worker creates one segment per server, `/dev/shm/syncswitch-<24 hex>`, readable by its
own user only, and offers it (its name and a random nonce written at its start) after the
token. The server maps it only if the name has that form, the file is a regular file of the
exact size its shard needs and belongs to this user, and the nonce matches (the same
memory, not a same-named file on another machine); it then removes the name, so nothing
else can open it, and answers whether it attached. Otherwise both ends use the socket.

The segment holds two regions of the shard's size in the wire's dtype: the request's values
(the worker writes them before it sends the header) and the reply's weights (the server
writes them before it sends the reply's header). Neither side writes a region while the
other may read it: a worker writes its next request only after every server answered the
last, and the synchronizer releases (answers) a worker only once its message's values were
folded into a sum or applied (core/sync/barrier_sum.py), so the server never reads a region
after its answer. A mapping is unmapped when the last array viewing it is gone.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import stat
import struct

import numpy as np

from syncswitch.core.sync.wire_dtype import WireDtype

SHM_DIR = "/dev/shm"
_NAME = re.compile(r"syncswitch-[0-9a-f]{24}")
NONCE_BYTES = 16
_ALIGN = 64  # each region starts on a cache line
# After the token, a u32 length of ATTACH_MARK introduces an offer instead of a request (no
# request can announce that many bytes: values_length refuses it).
ATTACH_MARK = 0xFFFF_FFFF
ATTACH = struct.Struct("<16s40s")  # nonce, name (ASCII, NUL-padded): a request header's size


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


class SharedRegions:
    """A mapped segment's two regions, as raw arrays of the wire's dtype."""

    def __init__(self, memory: mmap.mmap, values: int, dtype: WireDtype) -> None:
        self.values = values
        region = _round_up(values * dtype.itemsize)
        self.request = np.frombuffer(memory, dtype.raw_numpy, values, offset=_ALIGN)
        self.reply = np.frombuffer(memory, dtype.raw_numpy, values, offset=_ALIGN + region)


class OfferedSegment:
    """A worker's segment, offered to one server: `offer` is the attach record to send."""

    def __init__(self, values: int, dtype: WireDtype) -> None:
        self.name = f"syncswitch-{secrets.token_hex(12)}"
        self.path = os.path.join(SHM_DIR, self.name)
        nonce = secrets.token_bytes(NONCE_BYTES)
        size = segment_bytes(values, dtype)
        descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(descriptor, size)
            memory = mmap.mmap(descriptor, size)
        except BaseException:
            self.forget()
            raise
        finally:
            os.close(descriptor)
        memory[:NONCE_BYTES] = nonce
        self.regions = SharedRegions(memory, values, dtype)
        self.offer = ATTACH.pack(nonce, self.name.encode("ascii"))

    def forget(self) -> None:
        """Remove the name (the server removes it once attached; this covers the rest)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class Declined(Exception):
    """Why a server did not attach a worker's offer (the socket carries the values then)."""


def attach(offer: bytes, values: int, dtype: WireDtype) -> SharedRegions:
    """The server's side: map the segment `offer` names, after checking it (see the module
    docstring), and remove its name. Raises Declined, saying why."""
    nonce, raw_name = ATTACH.unpack(offer)
    name = raw_name.rstrip(b"\0").decode("ascii", errors="replace")
    if not _NAME.fullmatch(name):
        raise Declined("not a segment name")
    path = os.path.join(SHM_DIR, name)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:  # on another machine, or gone
        raise Declined(f"cannot open: {error.strerror}") from None
    try:
        info = os.fstat(descriptor)
        size = segment_bytes(values, dtype)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise Declined("not a file of this user")
        if info.st_size != size:
            raise Declined(f"{info.st_size} bytes, not {size}")
        memory = mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)
    if not secrets.compare_digest(memory[:NONCE_BYTES], nonce):
        raise Declined("another segment of that name")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return SharedRegions(memory, values, dtype)
