"""The data plane's shared-memory path, without Ray: a worker on the server's machine offers a
segment, the server checks and attaches it, and the values move through it while the socket
carries the headers. Offers the server must not trust are declined, and the socket is used."""

from __future__ import annotations

import os
import socket
import struct
import time

import numpy as np
import pytest

from syncswitch.core.sync.wire_dtype import WireDtype, encode, round_trip
from syncswitch.runtime.dataplane import Request, ServerEndpoint, WorkerChannel, encode_reply
from syncswitch.runtime.dataplane.shared import (
    ATTACH,
    ATTACH_MARK,
    SHM_DIR,
    WorkerSegment,
    segment_bytes,
)
from syncswitch.runtime.dataplane.wire import encode_request

LOOPBACK = "127.0.0.1"
pytestmark = pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="no /dev/shm here")


class Doubler:
    """Answers each request with its values times two (in the wire's dtype)."""

    def __init__(self, size: int, dtype: WireDtype = WireDtype.FLOAT32) -> None:
        self.dtype = dtype
        self.seen: list[Request] = []
        self.endpoint = ServerEndpoint(
            LOOPBACK, size, self.handle, clock=time.time, wire_dtype=dtype
        )

    def handle(self, ident: int, request: Request) -> None:
        self.seen.append(request)
        weights = encode(np.array(request.values) * 2, self.dtype)
        self.endpoint.send(ident, encode_reply(request.sequence, False, 0.5), weights)

    def channel(self, shared: list[int] | None) -> WorkerChannel:
        return WorkerChannel(
            [(self.endpoint.address, self.endpoint.token)],
            probe=lambda: True,
            wire_dtype=self.dtype,
            shared=shared,
        )


def _segments() -> set[str]:
    return {name for name in os.listdir(SHM_DIR) if name.startswith("syncswitch-")}


def _request(sequence: int) -> bytes:
    return encode_request(0, 0, sequence, sequence, 32, 0.5, 0.01, None)


@pytest.mark.parametrize("dtype", list(WireDtype))
def test_values_move_through_shared_memory_as_they_would_through_the_socket(dtype):
    results = {}
    for shared in (None, [1000]):
        server = Doubler(1000, dtype)
        before = _segments()
        channel = server.channel(shared)
        try:
            assert channel.attached == [shared is not None]
            assert _segments() == before  # the name is removed once attached
            replies = []
            for step in range(3):
                values = np.linspace(-1, 1, 1000, dtype=np.float32) * (step + 1)
                [reply] = channel.exchange([(_request(step), encode(values, dtype))])
                replies.append(np.array(reply.weights))
                assert reply.version == step and reply.progress == 0.5
                np.testing.assert_array_equal(server.seen[-1].values, round_trip(values, dtype))
        finally:
            channel.close()
            server.endpoint.close()
        results[shared is not None] = replies
        assert server.endpoint.declined == {}
    for by_socket, by_memory in zip(results[False], results[True], strict=True):
        np.testing.assert_array_equal(by_socket, by_memory)


def test_servers_share_one_segment_each_its_own_slice_of_it():
    servers = [Doubler(3), Doubler(5)]
    before = _segments()
    channel = WorkerChannel(
        [(s.endpoint.address, s.endpoint.token) for s in servers], lambda: True, shared=[3, 5]
    )
    try:
        assert channel.attached == [True, True] and _segments() == before
        assert channel.segment is not None
        whole = channel.segment.regions
        # The worker's gradient is the request region itself: nothing to copy in.
        whole.request[:] = np.arange(8, dtype=np.float32)
        replies = channel.exchange(
            [(_request(1), whole.request[:3]), (_request(2), whole.request[3:])]
        )
    finally:
        channel.close()
        for server in servers:
            server.endpoint.close()
    np.testing.assert_array_equal(servers[1].seen[0].values, [3, 4, 5, 6, 7])
    np.testing.assert_array_equal(whole.reply, np.arange(8) * 2)  # side by side, in order
    np.testing.assert_array_equal(np.concatenate([r.weights for r in replies]), whole.reply)


def test_a_shorter_gradient_still_reaches_the_server_which_judges_it():
    server = Doubler(8)
    channel = server.channel([8])
    try:
        [reply] = channel.exchange([(_request(1), np.ones(3, np.float32))])
    finally:
        channel.close()
        server.endpoint.close()
    assert server.seen[0].values.shape == (3,) and reply.weights.shape == (3,)


def _offer_raw(server: Doubler, offer: bytes) -> tuple[socket.socket, bytes]:
    host, _, port = server.endpoint.address.rpartition(":")
    connection = socket.create_connection((host, int(port)), timeout=5)
    connection.sendall(server.endpoint.token + struct.pack("<I", ATTACH_MARK) + offer)
    return connection, connection.recv(1)


def _forged(name: str, offset: int = 0, total: int = 4) -> bytes:
    return ATTACH.pack(b"\0" * 16, name.encode(), offset, total)


@pytest.mark.parametrize(
    ("make_offer", "reason"),
    [
        (lambda: _forged("../../etc/passwd"), "not a segment name"),
        (lambda: _forged("syncswitch-" + "0" * 12), "cannot open: No such file or directory"),
        (lambda: _forged("syncswitch-" + "0" * 12, 1, 4), "a slice of 4 at 1 does not fit 4"),
        (lambda: _forged("syncswitch-" + "0" * 12, 0, 1 << 62), "a slice of 4 at 0 does not"),
        (lambda: _wrong_size(), f"{segment_bytes(100, WireDtype.FLOAT32)} bytes, not "),
        (lambda: _wrong_nonce(), "another segment of that name"),
    ],
    ids=["path", "missing", "outside", "huge", "wrong-size", "wrong-nonce"],
)
def test_an_offer_it_cannot_trust_is_declined_and_the_socket_carries_the_values(make_offer, reason):
    server = Doubler(4)
    try:
        connection, answer = _offer_raw(server, make_offer())
        assert answer == b"\x00"
        [(declined, count)] = server.endpoint.declined.items()
        assert declined.startswith(reason) and count == 1
        # The connection goes on, over the socket: a request with its values is answered.
        values = np.arange(4, dtype=np.float32)
        connection.sendall(struct.pack("<I", values.nbytes) + _request(2) + values.tobytes())
        deadline = time.time() + 5
        while not server.seen and time.time() < deadline:
            time.sleep(0.01)
        np.testing.assert_array_equal(server.seen[0].values, values)
        connection.close()
    finally:
        server.endpoint.close()
        for name in _segments() & _left:
            os.unlink(os.path.join(SHM_DIR, name))


_left: set[str] = set()


def _wrong_size() -> bytes:
    segment = WorkerSegment(100, WireDtype.FLOAT32)  # offered as 4 values, its shard's size
    _left.add(segment.name)
    nonce, name, _, _ = ATTACH.unpack(segment.offer(0))
    return ATTACH.pack(nonce, name, 0, 4)


def _wrong_nonce() -> bytes:
    segment = WorkerSegment(4, WireDtype.FLOAT32)
    _left.add(segment.name)
    _, name, offset, total = ATTACH.unpack(segment.offer(0))
    return ATTACH.pack(bytes(16), name, offset, total)


def test_a_second_offer_closes_the_connection():
    server = Doubler(4)
    try:
        segment = WorkerSegment(4, WireDtype.FLOAT32)
        connection, answer = _offer_raw(server, segment.offer(0))
        assert answer == b"\x01"
        connection.sendall(struct.pack("<I", ATTACH_MARK) + segment.offer(0))
        assert connection.recv(1) == b""
        assert server.endpoint.rejected == {"shared memory offered twice": 1}
    finally:
        segment.forget()
        server.endpoint.close()


def test_a_segment_larger_than_dev_shm_has_room_for_leaves_the_values_on_the_socket():
    # A container's /dev/shm is often 64 MB: the segment is reserved up front, so a model
    # too large for it is sent over the socket instead of failing on first touch (SIGBUS).
    room = os.statvfs(SHM_DIR)
    too_many = room.f_bavail * room.f_frsize // 4 + 1
    server = Doubler(too_many)
    before = _segments()
    channel = server.channel([too_many])
    try:
        assert channel.attached == [False] and channel.segment is None
        assert _segments() == before
        [reply] = channel.exchange([(_request(1), np.ones(4, np.float32))])
        np.testing.assert_array_equal(reply.weights, [2, 2, 2, 2])
    finally:
        channel.close()
        server.endpoint.close()
