"""The server's end of the data plane: a listening socket and one thread that reads every
worker connection without blocking, holds emulated gradients until their step ends, and hands
each request to the shard; any thread may answer."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import secrets
import select
import selectors
import socket
import threading
import time
import traceback
from collections.abc import Callable

import numpy as np

from syncswitch.runtime.dataplane.wire import (
    FLOAT32,
    LENGTH,
    REQUEST,
    TOKEN_BYTES,
    MalformedMessage,
    Request,
    decode_request,
    no_delay,
    send_buffers,
    values_length,
)

_EXACT_WAIT_S = 0.002  # held gradients due sooner than this are waited for by a sleep
_SEND_TIMEOUT_S = 10.0  # a reply the worker's connection does not take by then is dropped


def _listening_socket(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((host, 0))  # a port the OS picks, on this address only
    listener.listen(1024)
    listener.setblocking(False)
    return listener


class _Connection:
    """One worker's connection as the server reads it, message by message, never blocking:
    the token first, then per request its length and header, then its values."""

    _HEAD = LENGTH.size + REQUEST.size

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
            self._expect(head[: self._HEAD])
            return None
        if self._values is None:
            (length,) = LENGTH.unpack_from(self._head)
            # Its own buffer per request: the synchronizer may keep the gradient (a barrier).
            self._values = np.empty(values_length(length, max_values), dtype=FLOAT32)
            if length:
                self._expect(self._values.data.cast("B"))
                return None
        request = decode_request(head[LENGTH.size : self._HEAD], self._values)
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
                send_buffers(
                    connection.sock,
                    [LENGTH.pack(weights.nbytes), header, weights],
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
            no_delay(sock)
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
