"""The data plane: one message each way per worker step, between a worker and each
parameter-server shard, over a plain TCP connection.

Why not a Ray actor call per step: docs/performance.md measured one call at about 2.4 ms of
CPU across the two processes (argument and reply pickling, Ray's per-task bookkeeping and its
I/O threads), five times the model's forward and backward pass. Why not ZeroMQ, which the
first version of this module used: every ZeroMQ message passes through an I/O thread on each
side, so a step's round trip woke six threads instead of two, and where workers share cores
each wake-up waits for one. Measured with 8 clients holding 20 ms steps on this 2-core
machine, a reply came 2.6-3.0 ms after the step ended over ZeroMQ and 0.6-0.7 ms over a
plain socket (docs/performance.md). Ray stays the control plane: it places and restarts the
processes, detects their deaths, and carries the rare calls (rejoin, drain, decisions).

The wire, little-endian:

- a worker opens one connection per server and first sends the server's 16-byte token,
  which the server made and handed out only through Ray (its `endpoint` call);
- a request: u32 byte length of the values, a 48-byte header (`encode_request`), the raw
  float32 values;
- a reply: u32 byte length of the weights, a 17-byte header (`encode_reply`), the weights.

The server reads every connection without blocking on one thread that owns the reading
(`selectors`), holds an emulated gradient until its step ends, and calls the handler; any
thread may answer with `send`. A wrong token, a length over the shard's size or values that
are not whole float32 close the connection before anything is allocated for it, and are
counted. A worker waits for its replies in slices of `PROBE_S`; between slices (and when a
connection closes) it asks its `probe` (a Ray call) whether the servers are alive, so a dead
server ends the worker's run as a failed Ray call did before.

Nothing here imports Ray: the wire format and both ends are tested without it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import secrets
import select
import selectors
import socket
import struct
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

import numpy as np

TOKEN_BYTES = 16
PROBE_S = 1.0  # a worker waiting longer than this asks whether its servers are alive
_EXACT_WAIT_S = 0.002  # held gradients due sooner than this are waited for by a sleep
_SEND_TIMEOUT_S = 10.0  # a reply the worker's connection does not take by then is dropped
_CLOSED_PROBES = 30  # a closed connection: probes (of up to 10 s each) before giving up

_LENGTH = struct.Struct("<I")
# worker, incarnation, sequence, computed_version, samples, loss, step_time_s, ready_at
_REQUEST = struct.Struct("<iiqqiddd")
# version, done, progress
_REPLY = struct.Struct("<qBd")
_FLOAT32 = np.dtype("<f4")


@dataclass(frozen=True, slots=True)
class Request:
    """One worker step as the server receives it (its slice of the gradient)."""

    worker: int
    incarnation: int
    sequence: int
    computed_version: int
    samples: int
    loss: float
    step_time_s: float
    ready_at: float | None  # emulation: wall time at which the emulated step ends
    values: np.ndarray  # float32, the server's own (writable) buffer


class Reply(NamedTuple):
    version: int
    weights: np.ndarray  # float32, the worker's own buffer
    done: bool
    progress: float


class MalformedMessage(ValueError):
    pass


def encode_request(
    worker: int,
    incarnation: int,
    sequence: int,
    computed_version: int,
    samples: int,
    loss: float,
    step_time_s: float,
    ready_at: float | None,
) -> bytes:
    """The fixed-size header of a request (the values follow it as they are)."""
    return _REQUEST.pack(
        worker,
        incarnation,
        sequence,
        computed_version,
        samples,
        loss,
        step_time_s,
        math.nan if ready_at is None else ready_at,
    )


def decode_request(header: bytes | bytearray | memoryview, values: np.ndarray) -> Request:
    worker, incarnation, sequence, version, samples, loss, step_s, ready_at = _REQUEST.unpack(
        header
    )
    return Request(
        worker=worker,
        incarnation=incarnation,
        sequence=sequence,
        computed_version=version,
        samples=samples,
        loss=loss,
        step_time_s=step_s,
        ready_at=None if math.isnan(ready_at) else ready_at,
        values=values,
    )


def values_length(byte_length: int, max_values: int) -> int:
    """How many float32 a request announcing `byte_length` bytes carries, checked before
    anything is allocated. The count is not checked against the shard's size here: a
    gradient of the wrong shape is the synchronizer's to count and drop (and to quarantine
    its sender for); the transport only bounds it."""
    if byte_length % _FLOAT32.itemsize:
        raise MalformedMessage(f"{byte_length} bytes of values: not whole float32")
    if byte_length > max_values * _FLOAT32.itemsize:
        raise MalformedMessage(
            f"{byte_length} bytes of values: more than {max_values * _FLOAT32.itemsize}"
        )
    return byte_length // _FLOAT32.itemsize


def encode_reply(version: int, done: bool, progress: float) -> bytes:
    return _REPLY.pack(version, done, progress)


def _listening_socket(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((host, 0))  # a port the OS picks, on this address only
    listener.listen(1024)
    listener.setblocking(False)
    return listener


def _no_delay(sock: socket.socket) -> None:
    # Each message is written at once; Nagle's algorithm would hold its tail for an ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _send_buffers(sock: socket.socket, buffers: list, on_block: Callable[[], None]) -> None:
    """Write every buffer (one system call when the kernel takes them all, as it usually
    does); `on_block` is called whenever it cannot take more yet."""
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        try:
            sent = sock.sendmsg(views)
        except (BlockingIOError, TimeoutError):
            on_block()
            continue
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


class _Connection:
    """One worker's connection as the server reads it, message by message, never blocking:
    the token first, then per request its length and header, then its values."""

    _HEAD = _LENGTH.size + _REQUEST.size

    def __init__(self, sock: socket.socket, ident: int) -> None:
        self.sock = sock
        self.ident = ident
        self.admitted = False
        self._head = bytearray(max(TOKEN_BYTES, self._HEAD))
        self._values: np.ndarray | None = None
        self._target = memoryview(self._head)[:TOKEN_BYTES]
        self._got = 0

    def read(self, token: bytes, max_values: int) -> list[Request]:
        """Every complete request now readable. Raises EOFError when the worker closed the
        connection, MalformedMessage when it broke the protocol."""
        complete: list[Request] = []
        while True:
            try:
                count = self.sock.recv_into(self._target[self._got :])
            except BlockingIOError:
                return complete
            if count == 0:
                raise EOFError
            self._got += count
            if self._got < len(self._target):
                continue
            request = self._advance(token, max_values)
            if request is not None:
                complete.append(request)

    def _advance(self, token: bytes, max_values: int) -> Request | None:
        """The current part is complete: check it and set up the next."""
        head = memoryview(self._head)
        if not self.admitted:
            if not secrets.compare_digest(bytes(self._target), token):
                raise MalformedMessage("wrong token")
            self.admitted = True
            return self._expect(head[: self._HEAD])
        if self._values is None:
            (length,) = _LENGTH.unpack_from(self._head)
            # Its own buffer per request: the synchronizer may keep the gradient (a barrier).
            self._values = np.empty(values_length(length, max_values), dtype=_FLOAT32)
            if length:
                return self._expect(memoryview(self._values).cast("B"))
        request = decode_request(head[_LENGTH.size : self._HEAD], self._values)
        self._values = None
        self._expect(head[: self._HEAD])
        return request

    def _expect(self, target: memoryview) -> None:
        self._target, self._got = target, 0


class ServerEndpoint:
    """The server's end: a listening socket and the one thread that reads every connection.

    `handle(ident, request)` is called on that thread, in the order the gradients count as
    arrived (an emulated one when its step ends). It and any other thread answer a worker with
    `send(ident, header, weights)`; `ident` names the connection the request came on.
    """

    def __init__(
        self,
        host: str,
        max_values: int,
        handle: Callable[[int, Request], None],
        *,
        clock: Callable[[], float],
    ) -> None:
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.max_values = max_values
        self._handle = handle
        self._clock = clock
        self._listener = _listening_socket(host)
        bound_host, port = self._listener.getsockname()[:2]
        self.address = f"[{bound_host}]:{port}" if ":" in bound_host else f"{bound_host}:{port}"
        self._connections: dict[int, _Connection] = {}
        self._idents = itertools.count()
        self._send_lock = threading.Lock()
        self._held: list[tuple[float, int, int, Request]] = []  # emulated, until ready_at
        self._order = itertools.count()
        self.rejected: dict[str, int] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake_read, self._wake_write = os.pipe()  # only to stop the thread
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._stopping = False
        self.failure: BaseException | None = None  # what ended the reading thread, if not close
        self._thread = threading.Thread(target=self._run, name="dataplane", daemon=True)
        self._thread.start()

    def send(self, ident: int, header: bytes, weights: np.ndarray) -> None:
        """Answer the worker on connection `ident`; safe from any thread. A connection that
        is gone is skipped (its worker is too)."""
        connection = self._connections.get(ident)
        if connection is None:
            return
        deadline = time.monotonic() + _SEND_TIMEOUT_S

        def wait_writable() -> None:
            # Only when the kernel's buffer is full, which a reply rarely finds it.
            remaining = deadline - time.monotonic()
            writable = select.poll()  # not select.select: a Ray process may hold fds >= 1024
            writable.register(connection.sock, select.POLLOUT)
            if remaining <= 0 or not writable.poll(1000 * remaining):
                raise TimeoutError

        with self._send_lock:
            try:
                _send_buffers(
                    connection.sock,
                    [_LENGTH.pack(weights.nbytes), header, weights],
                    wait_writable,
                )
            except (OSError, TimeoutError):
                # Not taking replies (or gone): the reading thread sees the close and drops
                # the connection; its worker is dead, hung or restarted.
                self._reject("reply not taken")
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        os.write(self._wake_write, b"\0")
        self._thread.join(timeout=5)
        for connection in list(self._connections.values()):
            connection.sock.close()
        self._listener.close()
        self._selector.close()
        os.close(self._wake_read)
        os.close(self._wake_write)

    # -- the reading thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as error:
            # A bug, not a worker's doing: say so instead of leaving every worker waiting.
            # Their connections close, so each one's run ends with a ConnectionError.
            self.failure = error
            for connection in list(self._connections.values()):
                self._drop(connection)
            traceback.print_exc()  # to the actor's log (RUN_DIR/ray.log)

    def _loop(self) -> None:
        while not self._stopping:
            timeout = None
            if self._held:
                # Woken a little early, _deliver_due sleeps the rest exactly (epoll's timeout
                # has 1 ms steps, and every step here waits for its reply).
                timeout = max(0.0, self._held[0][0] - self._clock() - _EXACT_WAIT_S / 2)
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._listener:
                    self._accept()
                elif isinstance(key.data, _Connection):
                    self._read(key.data)
            self._deliver_due()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            _no_delay(sock)
            connection = _Connection(sock, next(self._idents))
            self._connections[connection.ident] = connection
            self._selector.register(sock, selectors.EVENT_READ, connection)

    def _read(self, connection: _Connection) -> None:
        try:
            requests = connection.read(self.token, self.max_values)
        except MalformedMessage as error:
            self._reject(str(error))
            self._drop(connection)
            return
        except (EOFError, OSError):
            self._drop(connection)
            return
        for request in requests:
            if request.ready_at is not None and request.ready_at > self._clock():
                heapq.heappush(
                    self._held, (request.ready_at, next(self._order), connection.ident, request)
                )
            else:
                self._handle(connection.ident, request)

    def _drop(self, connection: _Connection) -> None:
        self._connections.pop(connection.ident, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection.sock)
        connection.sock.close()

    def _reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def _deliver_due(self) -> None:
        held = self._held
        while held:
            wait_s = held[0][0] - self._clock()
            if wait_s > _EXACT_WAIT_S:
                return
            if wait_s > 0:
                time.sleep(wait_s)
            _, _, ident, request = heapq.heappop(held)
            self._handle(ident, request)


class WorkerChannel:
    """A worker's end: one connection per server; one request and one reply per step.

    `probe()` raises if a server is gone, returns True if every server answered and False if
    it could not tell yet.
    """

    _HEAD = _LENGTH.size + _REPLY.size

    def __init__(
        self,
        endpoints: Sequence[tuple[str, bytes]],
        probe: Callable[[], bool],
        *,
        probe_s: float = PROBE_S,
    ) -> None:
        self._probe = probe
        self._sockets: list[socket.socket] = []
        self._head = bytearray(self._HEAD)
        try:
            for address, token in endpoints:
                host, _, port = address.rpartition(":")
                sock = self._connect(host.strip("[]"), int(port), probe_s)
                self._sockets.append(sock)
                _send_buffers(sock, [token], self._blocked)
        except BaseException:
            self.close()
            raise

    def exchange(self, requests: Sequence[tuple[bytes, np.ndarray]]) -> list[Reply]:
        """Send each server its (header, values) and wait for every reply.

        The values may be reused once this returns: a reply means its request was received.
        """
        for sock, (header, values) in zip(self._sockets, requests, strict=True):
            try:
                _send_buffers(sock, [_LENGTH.pack(values.nbytes), header, values], self._blocked)
            except (ConnectionResetError, BrokenPipeError):
                self._closed()
        return [self._receive(sock) for sock in self._sockets]

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    def _connect(self, host: str, port: int, probe_s: float) -> socket.socket:
        for _ in range(_CLOSED_PROBES):
            try:
                sock = socket.create_connection((host, port), timeout=probe_s)
            except (ConnectionRefusedError, TimeoutError):
                self._blocked()  # refused: the server is gone (probe raises) or not yet up
                continue
            _no_delay(sock)
            sock.settimeout(probe_s)
            return sock
        raise ConnectionError(f"no data-plane connection to {host}:{port}")

    def _receive(self, sock: socket.socket) -> Reply:
        head = memoryview(self._head)
        self._receive_into(sock, head)
        (length,) = _LENGTH.unpack_from(self._head)
        version, done, progress = _REPLY.unpack_from(self._head, _LENGTH.size)
        weights = np.empty(length // _FLOAT32.itemsize, dtype=_FLOAT32)
        self._receive_into(sock, memoryview(weights).cast("B"))
        return Reply(version, weights, bool(done), progress)

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
