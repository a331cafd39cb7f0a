"""The server's end of the data plane: a listening socket and one thread that reads every
worker connection without blocking, holds emulated gradients until their step ends, and hands
each request to the shard; any thread may answer.

Hostile clients (anyone on the machine can connect; only Ray's processes hold the token):
a connection that has not sent the token within `TOKEN_DEADLINE_S` is closed, at most
`MAX_PENDING` such connections are kept (a new one closes the oldest), and no error of
`accept` or `recv` ends the reading thread: each is counted by reason, and when the process
runs out of descriptors (EMFILE, ENFILE) or kernel memory the oldest unauthenticated
connection is closed and accepting pauses, backing off, while admitted workers are served.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import os
import secrets
import select
import selectors
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from syncswitch.core.cluster.emulation import EmulationConfig
from syncswitch.core.cluster.fifo import FifoQueue
from syncswitch.core.sync.wire_dtype import WireDtype
from syncswitch.runtime.dataplane.connection import Connection
from syncswitch.runtime.dataplane.wire import (
    LENGTH,
    TOKEN_BYTES,
    MalformedMessage,
    Request,
    no_delay,
    send_buffers,
    with_link_until,
)

_EXACT_WAIT_S = 0.002  # held gradients due sooner than this are waited for by a sleep
_SEND_TIMEOUT_S = 10.0  # a reply the worker's connection does not take by then is dropped
TOKEN_DEADLINE_S = 3.0  # a worker sends its token right after connecting; others are closed
MAX_PENDING = 64  # connections waiting for their token at once; a new one closes the oldest
# Accepted per round of the loop, at most: fewer than MAX_PENDING, so a worker's connection
# accepted in one round has its token read in the next before newer ones can push it out.
_ACCEPTS_PER_ROUND = 32
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 0.05, 1.0  # accepting paused after a resource error
_LOG_EVERY_S = 10.0  # a repeated accept error is written to the actor's log this often
# Errors of accept() about one connection that went away before it was taken: try the next.
_CONNECTION_GONE = {errno.ECONNABORTED, errno.EPROTO, errno.ECONNRESET}


def _listening_socket(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((host, 0))  # a port the OS picks, on this address only
    listener.listen(1024)
    listener.setblocking(False)
    return listener


class ServerEndpoint:
    """The server's end: a listening socket and the one thread that reads every connection.

    `handle(ident, request)` is called on that thread, in the order the gradients count as
    arrived (an emulated one when its step ends). It and any other thread answer a worker with
    `send(ident, header, weights)`; `ident` names the connection the request came on.

    `links`, the run's emulated links, when they give this server one of its own: requests
    cross it in turn, in the order their workers' links are done with them, streaming
    through both (core/cluster/emulation.py), before they are handled; replies cross it in
    turn the other way, each stamped with the time its turn ends, for its worker to wait
    for (the weights cannot wait here: the next apply may change them).
    """

    def __init__(
        self,
        host: str,
        max_values: int,
        handle: Callable[[int, Request], None],
        *,
        clock: Callable[[], float],
        wire_dtype: WireDtype = WireDtype.FLOAT32,
        links: EmulationConfig | None = None,
    ) -> None:
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.max_values = max_values
        self.wire_dtype = wire_dtype  # of requests' values; replies are sent as they are given
        self._handle = handle
        self._clock = clock
        self._listener = _listening_socket(host)
        bound_host, port = self._listener.getsockname()[:2]
        self.address = f"[{bound_host}]:{port}" if ":" in bound_host else f"{bound_host}:{port}"
        self._connections: dict[int, Connection] = {}
        # Connections that have not sent the token yet -> when they are closed (monotonic).
        self._pending: OrderedDict[int, float] = OrderedDict()
        self._paused_until: float | None = None  # accepting paused (resource exhaustion)
        self._backoff_s = _BACKOFF_MIN_S
        self._logged_at = -_LOG_EVERY_S
        self._idents = itertools.count()
        self._send_lock = threading.Lock()
        # Emulated requests until they are due: (due, order, ident, request, on the server's
        # link yet); one not yet across the link is due when it has crossed the worker's.
        self._held: list[tuple[float, int, int, Request, bool]] = []
        self._order = itertools.count()
        self._links = links if links is not None and links.server_link_gbps > 0 else None
        self._link_in, self._link_out = FifoQueue(), FifoQueue()
        self.rejected: dict[str, int] = {}
        self.attached = 0  # connections whose values travel through shared memory
        self.declined: dict[str, int] = {}  # shared-memory offers not attached, by reason
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
            if self._links is not None:
                link_s = self._links.server_link_s(weights.nbytes)
                header = with_link_until(header, self._link_out.serve(self._clock(), link_s))
            buffers = [LENGTH.pack(weights.nbytes), header, weights]
            try:
                shared = connection.shared
                if shared is not None:
                    # The worker reads them once the header arrives; it is waiting for it.
                    shared.reply[: weights.size] = weights
                    buffers.pop()
                send_buffers(connection.sock, buffers, wait_writable)
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
            ready = self._selector.select(self._timeout())
            # Connections first: a worker's token is read before new accepts could push its
            # connection out of the bounded pending set.
            accept = False
            for key, _ in ready:
                if key.fileobj is self._listener:
                    accept = True
                elif isinstance(key.data, Connection) and key.data.ident in self._connections:
                    self._read(key.data)
            if accept:
                self._accept()
            self._expire_pending()
            self._resume_accepting()
            self._deliver_due()

    def _timeout(self) -> float | None:
        """How long the selector may wait: until the next held gradient, pending deadline or
        the end of an accept pause (None: until something happens)."""
        waits: list[float] = []
        if self._held:
            # Woken a little early, _deliver_due sleeps the rest exactly (epoll's timeout
            # has 1 ms steps, and every step here waits for its reply).
            waits.append(self._held[0][0] - self._clock() - _EXACT_WAIT_S / 2)
        now = time.monotonic()
        if self._pending:
            waits.append(next(iter(self._pending.values())) - now)
        if self._paused_until is not None:
            waits.append(self._paused_until - now)
        return max(0.0, min(waits)) if waits else None

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_ROUND):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in _CONNECTION_GONE:
                    self._reject(f"accept failed: {_errno_name(error)}")
                    continue
                if self._accept_failed(error):
                    continue
                return
            self._backoff_s = _BACKOFF_MIN_S
            self._admit_socket(sock)

    def _admit_socket(self, sock: socket.socket) -> None:
        """Track a new connection as pending until its token arrives."""
        try:
            sock.setblocking(False)
            no_delay(sock)
        except OSError as error:  # reset before it was set up
            sock.close()
            self._reject(f"accept failed: {_errno_name(error)}")
            return
        if len(self._pending) >= MAX_PENDING:
            self._close_oldest_pending("too many connections without a token")
        connection = Connection(sock, next(self._idents), self.wire_dtype)
        try:
            self._selector.register(sock, selectors.EVENT_READ, connection)
        except (OSError, ValueError) as error:
            sock.close()
            self._reject(f"accept failed: {_errno_name(error)}")
            return
        self._connections[connection.ident] = connection
        self._pending[connection.ident] = time.monotonic() + TOKEN_DEADLINE_S

    def _accept_failed(self, error: OSError) -> bool:
        """Out of descriptors (EMFILE, ENFILE): close the oldest unauthenticated connection,
        if there is one, and try again (True). Otherwise (nothing to free, out of memory, or
        anything else accept should not say): pause accepting for a while, backing off, and
        serve the admitted workers meanwhile (False)."""
        reason = f"accept failed: {_errno_name(error)}"
        self._reject(reason)
        retry = error.errno in (errno.EMFILE, errno.ENFILE) and bool(self._pending)
        if retry:
            self._close_oldest_pending("closed to free a descriptor")
        else:
            pause_s = self._backoff_s
            self._backoff_s = min(2 * self._backoff_s, _BACKOFF_MAX_S)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._listener)
            self._paused_until = time.monotonic() + pause_s
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            # To the actor's log (RUN_DIR/ray.log): the run goes on, but something may be
            # flooding this port.
            print(
                f"syncswitch data plane: {reason} ({self.rejected[reason]} so far); "
                f"{'an unauthenticated connection closed' if retry else 'accepting paused'}; "
                "admitted workers are served meanwhile",
                file=sys.stderr,
                flush=True,
            )
        return retry

    def _resume_accepting(self) -> None:
        if self._paused_until is None or time.monotonic() < self._paused_until:
            return
        self._paused_until = None
        self._selector.register(self._listener, selectors.EVENT_READ)

    def _expire_pending(self) -> None:
        now = time.monotonic()
        while self._pending:
            ident, deadline = next(iter(self._pending.items()))
            if deadline > now:
                return
            self._close_pending(ident, "no token in time")

    def _close_oldest_pending(self, reason: str) -> None:
        while self._pending:
            ident = next(iter(self._pending))
            connection = self._connections.get(ident)
            if connection is None:
                self._pending.pop(ident)
                continue
            # A worker's token may be waiting unread: it is admitted then, not closed.
            self._read(connection)
            if ident not in self._connections:
                return  # it closed: a descriptor is free
            if ident in self._pending:
                self._close_pending(ident, reason)
                return

    def _close_pending(self, ident: int, reason: str) -> None:
        self._pending.pop(ident, None)
        connection = self._connections.get(ident)
        if connection is not None:
            self._reject(reason)
            self._drop(connection)

    def _read(self, connection: Connection) -> None:
        try:
            requests = connection.read(self.token, self.max_values)
        except MalformedMessage as error:
            self._reject(str(error))
            self._drop(connection)
            return
        except (EOFError, OSError):
            self._drop(connection)
            return
        if connection.admitted:
            self._pending.pop(connection.ident, None)
        if connection.answer is not None and not self._answer_offer(connection):
            return
        on_link = self._links is not None  # every request takes its turn on it first
        for request in requests:
            now = self._clock()
            due = now if request.ready_at is None else request.ready_at
            if on_link or due > now:
                held = (due, next(self._order), connection.ident, request, not on_link)
                heapq.heappush(self._held, held)
            else:
                self._handle(connection.ident, request)

    def _answer_offer(self, connection: Connection) -> bool:
        """Tell the worker whether its values travel through shared memory (b"\\x01") or
        here; False if its connection is gone."""
        answer, connection.answer = connection.answer, None
        self.attached += connection.shared is not None
        if connection.declined is not None:
            self.declined[connection.declined] = self.declined.get(connection.declined, 0) + 1
        with self._send_lock:
            try:
                connection.sock.send(answer or b"\x00")
            except OSError:  # a fresh connection's buffer is empty: it went away
                self._drop(connection)
                return False
        return True

    def _drop(self, connection: Connection) -> None:
        self._connections.pop(connection.ident, None)
        self._pending.pop(connection.ident, None)
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
            due, order, ident, request, crossed = heapq.heappop(held)
            if not crossed and self._links is not None:
                # Its turn on this server's link, from when its worker's link began to carry
                # it, in the order the workers' links are done with the requests.
                nbytes = request.values.size * self.wire_dtype.itemsize
                link_s, latency_s = self._links.server_link_s(nbytes), self._links.latency_s
                began = due - latency_s - self._links.link_s(nbytes)
                crossed_at = max(due, self._link_in.serve(began, link_s) + latency_s)
                heapq.heappush(held, (crossed_at, order, ident, request, True))
                continue
            self._handle(ident, request)


def _errno_name(error: BaseException) -> str:
    number = getattr(error, "errno", None)
    return errno.errorcode.get(number, type(error).__name__) if number else type(error).__name__
