"""The data plane: one ZeroMQ message each way per worker step, between a worker and each
parameter-server shard.

Why not a Ray actor call per step: docs/performance.md measured one call at about 2.4 ms of
CPU across the two processes (argument and reply pickling, Ray's per-task bookkeeping and its
I/O threads), five times the model's forward and backward pass. Ray stays the control plane:
it places and restarts the processes, detects their deaths, and carries the rare calls
(rejoin, drain, the controller's decisions). What crosses here every step is three frames
each way: an authentication token, a fixed-size binary header and the raw float32 values.

- The server binds one ROUTER socket on its node's IP address (127.0.0.1 for a local Ray,
  which is locked to loopback), on a port the OS picks, so it works across nodes as Ray does.
- Each message starts with a random 16-byte token that the server made and handed out only
  through Ray (its `endpoint` call), so a process that can reach the port but is not part of
  the run cannot submit gradients. A message that is malformed, too large (ZeroMQ's
  MAXMSGSIZE) or wrongly authenticated is dropped and counted, never parsed further.
- One thread per server owns the socket (ZeroMQ sockets are not thread-safe): it receives,
  holds an emulated gradient until its step ends, calls the handler, and sends the replies
  that the handler or any other thread queued with `send`.
- A worker waits for its replies in slices of `PROBE_S`; between slices it asks its `probe`
  (a Ray call) whether the servers are still alive, so a dead server ends the worker's run
  as a failed Ray call did before.

Nothing here imports Ray: the wire format and both ends are tested without it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import secrets
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import zmq

TOKEN_BYTES = 16
_EXACT_WAIT_S = 0.002  # held gradients due sooner than this are waited for by a sleep
PROBE_S = 1.0  # a worker waiting longer than this asks whether its servers are alive

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
    values: np.ndarray  # float32, the server's own (writable) copy


class Reply(NamedTuple):
    version: int
    weights: np.ndarray  # read-only view of the received frame
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
    """The fixed-size header of a request (the values travel as their own frame)."""
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


def decode_request(header: bytes, values: memoryview | bytes, max_values: int) -> Request:
    """A request as the server keeps it. The values' length is not checked against the
    shard's here: a gradient of the wrong shape is the synchronizer's to count and drop (and
    to quarantine its sender for); the transport only bounds it."""
    if len(header) != _REQUEST.size:
        raise MalformedMessage(f"header of {len(header)} bytes, expected {_REQUEST.size}")
    if len(values) % _FLOAT32.itemsize or len(values) > max_values * _FLOAT32.itemsize:
        raise MalformedMessage(
            f"{len(values)} bytes of values, expected a multiple of {_FLOAT32.itemsize} "
            f"up to {max_values * _FLOAT32.itemsize}"
        )
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
        # The frame is read-only and is freed with the message; the server keeps a copy.
        values=np.frombuffer(values, dtype=_FLOAT32).copy(),
    )


def encode_reply(version: int, done: bool, progress: float) -> bytes:
    return _REPLY.pack(version, done, progress)


def decode_reply(header: bytes, weights: memoryview | bytes) -> Reply:
    if len(header) != _REPLY.size:
        raise MalformedMessage(f"reply header of {len(header)} bytes, expected {_REPLY.size}")
    version, done, progress = _REPLY.unpack(header)
    return Reply(version, np.frombuffer(weights, dtype=_FLOAT32), bool(done), progress)


def tcp_address(host: str) -> str:
    """A ZeroMQ bind address on `host` with a port the OS picks."""
    return f"tcp://[{host}]:*" if ":" in host else f"tcp://{host}:*"


class ServerEndpoint:
    """The server's end: a ROUTER socket and the one thread that owns it.

    `handle(identity, request)` is called on that thread, in the order the gradients count as
    arrived (an emulated one when its step ends). It and any other thread answer a worker with
    `send(identity, header, weights)`.
    """

    def __init__(
        self,
        host: str,
        values_len: int,
        handle: Callable[[bytes, Request], None],
        *,
        clock: Callable[[], float],
    ) -> None:
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.values_len = values_len
        self._handle = handle
        self._clock = clock
        self._context = zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # A peer cannot make the server allocate more than one largest valid message.
        self._socket.setsockopt(zmq.MAXMSGSIZE, values_len * _FLOAT32.itemsize + 4096)
        if ":" in host:
            self._socket.setsockopt(zmq.IPV6, 1)
        self._socket.bind(tcp_address(host))
        self.address: str = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._outbox: deque[tuple[bytes, bytes, np.ndarray]] = deque()
        # Another thread wakes the socket's thread through a pipe, which zmq.Poller can watch.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._held: list[tuple[float, int, bytes, Request]] = []  # emulated, until ready_at
        self._order = itertools.count()
        self.rejected: dict[str, int] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="dataplane", daemon=True)
        self._thread.start()

    def send(self, identity: bytes, header: bytes, weights: np.ndarray) -> None:
        """Queue a reply; safe from any thread."""
        self._outbox.append((identity, header, weights))
        if threading.current_thread() is not self._thread:
            os.write(self._wake_write, b"\0")

    def close(self) -> None:
        self._stopping = True
        os.write(self._wake_write, b"\0")
        self._thread.join(timeout=5)
        self._socket.close(linger=0)
        os.close(self._wake_read)
        os.close(self._wake_write)

    # -- the socket's thread ------------------------------------------------------------------

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._wake_read, zmq.POLLIN)
        while not self._stopping:
            timeout_ms = None
            if self._held:
                # Rounded down: woken early, _deliver_due sleeps the last millisecond exactly
                # (a poll timeout has 1 ms steps, and every step here waits for its reply).
                timeout_ms = max(0, int((self._held[0][0] - self._clock()) * 1000) - 1)
            events = dict(poller.poll(timeout_ms))
            if self._wake_read in events:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)
            if self._socket in events:
                self._receive_all()
            self._deliver_due()
            self._flush()

    def _receive_all(self) -> None:
        while True:
            try:
                frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            identity = frames[0].bytes
            request = self._parse(frames)
            if request is None:
                continue
            if request.ready_at is not None and request.ready_at > self._clock():
                heapq.heappush(self._held, (request.ready_at, next(self._order), identity, request))
            else:
                self._handle(identity, request)
                self._flush()

    def _parse(self, frames: Sequence[zmq.Frame]) -> Request | None:
        # identity, token, header, values
        if len(frames) != 4:
            self._reject(f"{len(frames) - 1} frames")
            return None
        if not secrets.compare_digest(frames[1].bytes, self.token):
            self._reject("wrong token")
            return None
        try:
            return decode_request(frames[2].bytes, frames[3].buffer, self.values_len)
        except MalformedMessage as error:
            self._reject(str(error))
            return None

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
            _, _, identity, request = heapq.heappop(held)
            self._handle(identity, request)

    def _flush(self) -> None:
        outbox = self._outbox
        while outbox:
            identity, header, weights = outbox.popleft()
            # Zero-copy for large weights: the array is immutable once cached by the server.
            self._socket.send_multipart([identity, header, weights], copy=False)


class WorkerChannel:
    """A worker's end: one DEALER socket per server; one request and one reply per step."""

    def __init__(
        self,
        endpoints: Sequence[tuple[str, bytes]],
        probe: Callable[[], None],
        *,
        probe_s: float = PROBE_S,
    ) -> None:
        self._context = zmq.Context.instance()
        self._sockets: list[zmq.Socket] = []
        self._tokens: list[bytes] = []
        self._poller = zmq.Poller()
        for address, token in endpoints:
            socket = self._context.socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            if address.startswith("tcp://["):
                socket.setsockopt(zmq.IPV6, 1)
            socket.connect(address)
            self._poller.register(socket, zmq.POLLIN)
            self._sockets.append(socket)
            self._tokens.append(token)
        self._probe = probe
        self._probe_ms = probe_s * 1000

    def exchange(self, requests: Sequence[tuple[bytes, np.ndarray]]) -> list[Reply]:
        """Send each server its (header, values) and wait for every reply.

        The values may be reused once this returns: a reply means its request was received.
        """
        for socket, token, (header, values) in zip(
            self._sockets, self._tokens, requests, strict=True
        ):
            socket.send_multipart([token, header, values], copy=False)
        replies: list[Reply | None] = [None] * len(self._sockets)
        waiting = len(self._sockets)
        while waiting:
            events = dict(self._poller.poll(self._probe_ms))
            if not events:
                self._probe()  # raises if a server is gone
                continue
            for index, socket in enumerate(self._sockets):
                if socket in events:
                    header, weights = socket.recv_multipart(copy=False)
                    if replies[index] is None:
                        waiting -= 1
                    replies[index] = decode_reply(header.bytes, weights.buffer)
        return replies  # type: ignore[return-value]

    def close(self) -> None:
        for socket in self._sockets:
            socket.close(linger=0)
        self._sockets.clear()
