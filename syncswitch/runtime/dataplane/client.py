"""A worker's end of the data plane: one connection per server shard, one request and one
reply per step; a reply that is late makes it ask (through Ray) whether its servers live.
A server on the same machine takes the values through shared memory (shared.py)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import NoReturn

import numpy as np

from syncswitch.core.sync.wire_dtype import WireDtype, decode
from syncswitch.runtime.dataplane.shared import ATTACH_MARK, SharedRegions, WorkerSegment
from syncswitch.runtime.dataplane.wire import (
    LENGTH,
    PROBE_S,
    REPLY,
    Reply,
    decode_reply,
    no_delay,
    send_buffers,
)

_CLOSED_PROBES = 30  # a closed connection: probes (of up to 10 s each) before giving up


class WorkerChannel:
    """A worker's end: one connection per server; one request and one reply per step.

    `probe()` raises if a server is gone, returns True if every server answered and False if
    it could not tell yet. `shared`, each server's number of values (the shards, in order, are
    the flat vector): offer each its slice of one shared-memory segment (a server on this
    machine attaches it; `attached` says which did, `segment` is the whole of it).
    """

    _HEAD = LENGTH.size + REPLY.size

    def __init__(
        self,
        endpoints: Sequence[tuple[str, bytes]],
        probe: Callable[[], bool],
        *,
        probe_s: float = PROBE_S,
        wire_dtype: WireDtype = WireDtype.FLOAT32,
        shared: Sequence[int] | None = None,
    ) -> None:
        self._probe = probe
        self._dtype = wire_dtype  # of the replies' weights
        self._sockets: list[socket.socket] = []
        self._shared: list[SharedRegions | None] = []  # per server: attached, or the socket
        self._head = bytearray(self._HEAD)
        self.segment = _segment(shared, wire_dtype)
        try:
            offsets = np.cumsum([0, *(shared or [])]).tolist()
            for index, (address, token) in enumerate(endpoints):
                host, _, port = address.rpartition(":")
                sock = self._connect(host.strip("[]"), int(port), probe_s)
                self._sockets.append(sock)
                send_buffers(sock, [token], self._blocked)
                attached = self.segment is not None and self._offer(sock, offsets[index])
                self._shared.append(self._slice(offsets, index) if attached else None)
        except BaseException:
            self.close()
            raise
        finally:
            if self.segment is not None:
                self.segment.forget()
        if not all(self.attached):
            self.segment = None  # the replies are not all in it

    @property
    def attached(self) -> list[bool]:
        """Per server: whether the values travel through shared memory."""
        return [regions is not None for regions in self._shared]

    def exchange(self, requests: Sequence[tuple[bytes, np.ndarray]]) -> list[Reply]:
        """Send each server its (header, values) and wait for every reply.

        The values are sent as they are (already in the wire's dtype: `wire_dtype.encode`),
        and may be reused once this returns: a reply means its request was received. The
        replies' weights come back widened to float32; through shared memory they are a view
        of it, valid until the next exchange.
        """
        for sock, regions, (header, values) in zip(
            self._sockets, self._shared, requests, strict=True
        ):
            buffers = [LENGTH.pack(values.nbytes), header, values]
            if regions is not None:
                if not _same_memory(values, regions.request):
                    regions.request[: values.size] = values
                buffers.pop()
            try:
                send_buffers(sock, buffers, self._blocked)
            except (ConnectionResetError, BrokenPipeError):
                self._closed()
        return [self._receive(s, r) for s, r in zip(self._sockets, self._shared, strict=True)]

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        self._shared.clear()  # unmapped once the last reply viewing it is gone

    def _offer(self, sock: socket.socket, offset: int) -> bool:
        """Offer the server its slice of the segment; whether it attached it (if not, the
        socket carries the values, as it must across machines)."""
        assert self.segment is not None
        send_buffers(sock, [LENGTH.pack(ATTACH_MARK), self.segment.offer(offset)], self._blocked)
        answer = bytearray(1)
        self._receive_into(sock, memoryview(answer))
        return answer == b"\x01"

    def _slice(self, offsets: list[int], index: int) -> SharedRegions:
        assert self.segment is not None
        return self.segment.regions[offsets[index] : offsets[index + 1]]

    def _connect(self, host: str, port: int, probe_s: float) -> socket.socket:
        for _ in range(_CLOSED_PROBES):
            try:
                sock = socket.create_connection((host, port), timeout=probe_s)
            except (ConnectionRefusedError, TimeoutError):
                self._blocked()  # refused: the server is gone (probe raises) or not yet up
                continue
            no_delay(sock)
            sock.settimeout(probe_s)
            return sock
        raise ConnectionError(f"no data-plane connection to {host}:{port}")

    def _receive(self, sock: socket.socket, regions: SharedRegions | None) -> Reply:
        head = memoryview(self._head)
        self._receive_into(sock, head)
        (length,) = LENGTH.unpack_from(self._head)
        version, done, progress, local, link_until = decode_reply(self._head, LENGTH.size)
        dtype = self._dtype
        count = length // dtype.itemsize
        if regions is not None:
            raw = regions.reply[:count]  # the server wrote them before the header
        else:
            raw = np.empty(count, dtype=dtype.raw_numpy)
            self._receive_into(sock, raw.data.cast("B"))
        return Reply(version, decode(raw, dtype), done, progress, local, link_until)

    def _receive_into(self, sock: socket.socket, target: memoryview) -> None:
        got = 0
        while got < len(target):
            try:
                count = sock.recv_into(target[got:])
            except TimeoutError:
                self._blocked()
                continue
            except ConnectionResetError:
                count = 0
            if count == 0:
                self._closed()
            got += count

    def _blocked(self) -> None:
        self._probe()  # raises if a server is gone; otherwise wait on

    def _closed(self) -> NoReturn:
        """The server closed the connection: it died (the probe raises once Ray knows, which
        may take a moment) or it dropped this worker."""
        for _ in range(_CLOSED_PROBES):
            if self._probe():
                raise ConnectionError("a parameter server closed its data-plane connection")
        raise ConnectionError("a parameter server closed its data-plane connection")


def _segment(shared: Sequence[int] | None, dtype: WireDtype) -> WorkerSegment | None:
    if shared is None:
        return None
    try:
        return WorkerSegment(sum(shared), dtype)
    except OSError:  # no /dev/shm here, or it is full: the socket carries the values
        return None


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `a` is the first len(a) values of `b` already (the worker's gradient lives in
    the request region: nothing to copy)."""
    return a.dtype == b.dtype and a.ctypes.data == b.ctypes.data and a.size <= b.size
