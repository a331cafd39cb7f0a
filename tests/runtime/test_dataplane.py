"""The data plane's wire format and both ends, without Ray (real TCP sockets on loopback)."""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time

import numpy as np
import pytest

from syncswitch.core.cluster.emulation import EmulationConfig
from syncswitch.core.sync.wire_dtype import WireDtype, encode, round_trip
from syncswitch.runtime.dataplane import (
    MalformedMessage,
    Request,
    ServerEndpoint,
    WorkerChannel,
    decode_request,
    encode_reply,
    encode_request,
    values_length,
)

LOOPBACK = "127.0.0.1"


class Echo:
    """A server handler that answers every request at once with version = its sequence."""

    def __init__(self, values_len: int, answer: bool = True) -> None:
        self.endpoint = ServerEndpoint(LOOPBACK, values_len, self.handle, clock=time.time)
        self.seen: list[tuple[float, Request]] = []
        self.answer = answer
        self.identities: list[int] = []

    def handle(self, identity: int, request: Request) -> None:
        self.seen.append((time.time(), request))
        self.identities.append(identity)
        if self.answer:
            self.endpoint.send(
                identity, encode_reply(request.sequence, False, 0.5), request.values * 2
            )


@pytest.fixture
def echo():
    server = Echo(4)
    yield server
    server.endpoint.close()


def _request(sequence: int = 0, ready_at: float | None = None, worker: int = 1) -> bytes:
    return encode_request(worker, 2, sequence, 7, 32, 1.25, 0.02, ready_at)


def test_a_step_crosses_and_is_answered_with_every_field_intact(echo):
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: True)
    values = np.arange(4, dtype=np.float32)
    [reply] = channel.exchange([(_request(sequence=5), values)])
    channel.close()
    _, request = echo.seen[0]
    assert (request.worker, request.incarnation, request.sequence) == (1, 2, 5)
    assert (request.computed_version, request.samples) == (7, 32)
    assert (request.loss, request.step_time_s, request.ready_at) == (1.25, 0.02, None)
    np.testing.assert_array_equal(request.values, values)
    assert request.values.flags.writeable  # the server's own copy, safe to keep
    assert (reply.version, reply.done, reply.progress) == (5, False, 0.5)
    np.testing.assert_array_equal(reply.weights, values * 2)


def test_a_gradient_of_the_wrong_shape_reaches_the_server_which_judges_it(echo):
    # The synchronizer counts it as a shape_mismatch drop and quarantines the sender; a
    # transport that swallowed it would leave the worker waiting forever.
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: True)
    [reply] = channel.exchange([(_request(sequence=4), np.ones(3, np.float32))])
    channel.close()
    assert reply.version == 4 and echo.seen[0][1].values.shape == (3,)


def test_the_server_binds_where_it_is_told_only(echo):
    assert echo.endpoint.address.startswith(f"{LOOPBACK}:")


def test_each_server_answers_its_own_slice():
    servers = [Echo(2), Echo(3)]
    try:
        channel = WorkerChannel(
            [(s.endpoint.address, s.endpoint.token) for s in servers], probe=lambda: True
        )
        replies = channel.exchange(
            [
                (_request(1), np.ones(2, dtype=np.float32)),
                (_request(2), np.full(3, 3, dtype=np.float32)),
            ]
        )
        channel.close()
    finally:
        for server in servers:
            server.endpoint.close()
    assert [r.version for r in replies] == [1, 2]
    np.testing.assert_array_equal(replies[1].weights, [6, 6, 6])


def _raw_connection(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _closed_by_server(connection: socket.socket) -> bool:
    # A close with unread data left behind reaches the peer as a reset.
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def _frame(header: bytes, values: bytes) -> bytes:
    return struct.pack("<I", len(values)) + header + values


def _wait_for(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("token", "message", "reason"),
    [
        (b"x" * 16, _frame(_request(), np.zeros(4, np.float32).tobytes()), "wrong token"),
        ("TOKEN", _frame(_request(), b"\0" * 13), "13 bytes of values: not whole float32"),
        ("TOKEN", struct.pack("<I", 1 << 30) + _request(), "1073741824 bytes of values: more"),
    ],
    ids=["wrong-token", "not-float32", "too-large"],
)
def test_a_bad_message_closes_its_connection_unread_and_is_counted(echo, token, message, reason):
    token = echo.endpoint.token if token == "TOKEN" else token
    connection = _raw_connection(echo.endpoint.address)
    connection.sendall(token + message)
    assert _closed_by_server(connection)  # nothing answered
    connection.close()
    _wait_for(lambda: echo.endpoint.rejected)
    assert not echo.seen
    [(counted, times)] = echo.endpoint.rejected.items()
    assert reason in counted and times == 1


def test_an_oversized_announcement_allocates_nothing_and_the_server_serves_on(echo):
    intruder = _raw_connection(echo.endpoint.address)
    # Announces 1 GiB and sends none of it: refused on the length alone.
    intruder.sendall(echo.endpoint.token + struct.pack("<I", 1 << 30) + _request())
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: True)
    [reply] = channel.exchange([(_request(sequence=3), np.ones(4, np.float32))])
    channel.close()
    intruder.close()
    assert reply.version == 3
    assert [r.sequence for _, r in echo.seen] == [3]


def test_a_message_split_into_single_bytes_is_read_whole(echo):
    connection = _raw_connection(echo.endpoint.address)
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    values = np.arange(4, dtype=np.float32)
    data = echo.endpoint.token + _frame(_request(sequence=8), values.tobytes())
    for index in range(len(data)):
        connection.sendall(data[index : index + 1])
        time.sleep(0.0005)
    _wait_for(lambda: echo.seen)
    connection.close()
    np.testing.assert_array_equal(echo.seen[0][1].values, values)
    assert echo.seen[0][1].sequence == 8


def test_emulated_steps_count_as_arrived_when_they_end_in_that_order(echo):
    echo.answer = False
    connection = _raw_connection(echo.endpoint.address)
    now = time.time()
    data = echo.endpoint.token
    for sequence, delay_s in [(0, 0.15), (1, 0.05), (2, 0.0)]:
        header = _request(sequence, ready_at=now + delay_s if delay_s else None)
        data += _frame(header, np.zeros(4, np.float32).tobytes())
    connection.sendall(data)
    _wait_for(lambda: len(echo.seen) == 3)
    connection.close()
    assert [r.sequence for _, r in echo.seen] == [2, 1, 0]
    for seen_at, request in echo.seen:
        if request.ready_at is not None:
            assert seen_at >= request.ready_at
            assert seen_at - request.ready_at < 0.03  # held no longer than it must be


def test_a_servers_emulated_link_takes_requests_in_turn_and_stamps_each_reply():
    # 0.1 s per message (16 bytes at 1,280 bit/s): three requests due at once are handled
    # one link-time apart, and the replies, sent at once, each carry the time its turn on
    # the link ends.
    server = Echo(4)
    links = EmulationConfig(server_link_gbps=1280 / 1e9)
    server.endpoint = ServerEndpoint(LOOPBACK, 4, server.handle, clock=time.time, links=links)
    try:
        channels = [
            WorkerChannel([(server.endpoint.address, server.endpoint.token)], probe=lambda: True)
            for _ in range(3)
        ]
        due = time.time() + 0.05
        results: list = [None] * 3

        def exchange(index: int) -> None:
            request = (_request(index, ready_at=due, worker=index), np.ones(4, np.float32))
            [results[index]] = channels[index].exchange([request])

        threads = [threading.Thread(target=exchange, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        for channel in channels:
            channel.close()
    finally:
        server.endpoint.close()
    handled = sorted(at for at, _ in server.seen)
    for turn, at in enumerate(handled, start=1):
        assert at >= due + 0.1 * turn  # 16 bytes at 160 bytes/s: 0.1 s each, in turn
    assert handled[-1] - due < 0.3 + 0.1  # and no longer than the turns take (with slack)
    stamps = sorted(reply.link_until for reply in results)
    # Each reply crossed after the one before it: 0.1 s apart, from its handling on.
    assert stamps[0] >= handled[0] + 0.1
    assert all(b - a >= 0.1 - 1e-6 for a, b in itertools.pairwise(stamps))


def test_without_a_servers_link_a_reply_carries_no_link_time(echo):
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: True)
    [reply] = channel.exchange([(_request(sequence=1), np.ones(4, np.float32))])
    channel.close()
    assert reply.link_until is None


def test_a_reply_from_another_thread_wakes_the_socket_thread(echo):
    echo.answer = False  # left waiting, as at a BSP barrier
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: True)

    def release_later() -> None:
        _wait_for(lambda: echo.identities)
        time.sleep(0.1)
        echo.endpoint.send(echo.identities[0], encode_reply(9, True, 1.0), np.zeros(4, np.float32))

    releaser = threading.Thread(target=release_later)
    releaser.start()
    started = time.time()
    [reply] = channel.exchange([(_request(), np.ones(4, np.float32))])
    releaser.join()
    channel.close()
    assert (reply.version, reply.done) == (9, True)
    assert time.time() - started < 2.0


def test_a_late_reply_makes_the_worker_probe_its_servers_and_a_probe_error_ends_the_wait(echo):
    echo.answer = False
    probes: list[float] = []

    def probe() -> bool:
        probes.append(time.time())
        if len(probes) == 2:
            raise ConnectionError("server died")
        return True

    channel = WorkerChannel(
        [(echo.endpoint.address, echo.endpoint.token)], probe=probe, probe_s=0.05
    )
    with pytest.raises(ConnectionError, match="server died"):
        channel.exchange([(_request(), np.ones(4, np.float32))])
    channel.close()
    assert len(probes) == 2


def test_a_closed_connection_asks_the_probe_and_ends_the_wait(echo):
    echo.answer = False
    asked: list[int] = []

    def probe() -> bool:
        asked.append(1)
        raise RuntimeError("the server is dead")  # what Ray's RayActorError stands for

    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=probe)
    _wait_for(lambda: echo.endpoint._connections)
    echo.endpoint.close()  # the server's process ends: its sockets close
    with pytest.raises(RuntimeError, match="the server is dead"):
        channel.exchange([(_request(), np.ones(4, np.float32))])
    channel.close()
    assert asked


def test_a_failed_reading_thread_closes_every_connection_and_says_why():
    def broken(identity: int, request: Request) -> None:
        raise ZeroDivisionError("a bug in the handler")

    endpoint = ServerEndpoint(LOOPBACK, 4, broken, clock=time.time)
    channel = WorkerChannel([(endpoint.address, endpoint.token)], probe=lambda: True)
    with pytest.raises(ConnectionError, match="closed its data-plane connection"):
        channel.exchange([(_request(), np.ones(4, np.float32))])
    channel.close()
    assert isinstance(endpoint.failure, ZeroDivisionError)
    endpoint.close()


def test_lengths_are_checked_before_anything_is_allocated():
    with pytest.raises(MalformedMessage, match="not whole float32"):
        values_length(6, 10)
    with pytest.raises(MalformedMessage, match="more than 40"):
        values_length(44, 10)
    assert values_length(12, 10) == 3  # a wrong shape is the synchronizer's to judge
    request = decode_request(_request(ready_at=12.5), np.ones(1, np.float32))
    assert request.ready_at == 12.5 and request.samples == 32


@pytest.mark.parametrize("dtype", list(WireDtype))
def test_values_cross_in_the_wire_dtype_and_arrive_as_float32(dtype):
    # The worker sends encode(gradient); the server gets it widened, as the simulator's
    # round_trip makes it; the reply's weights cross the same way.
    def handle(identity: int, request: Request) -> None:
        seen.append(request)
        weights = request.values * 3
        endpoint.send(identity, encode_reply(request.sequence, False, 0.5), encode(weights, dtype))

    seen: list[Request] = []
    endpoint = ServerEndpoint(LOOPBACK, 5, handle, clock=time.time, wire_dtype=dtype)
    values = np.array([0.1, -3.3, 1e-3, 2.0**20, 1 / 3], dtype=np.float32)
    try:
        channel = WorkerChannel(
            [(endpoint.address, endpoint.token)], probe=lambda: True, wire_dtype=dtype
        )
        [reply] = channel.exchange([(_request(sequence=3), encode(values, dtype))])
        channel.close()
    finally:
        endpoint.close()
    [request] = seen
    arrived = round_trip(values, dtype)
    assert request.values.dtype == np.float32 and request.values.flags.writeable
    np.testing.assert_array_equal(request.values, arrived)
    assert (request.values != values).any() == (dtype is not WireDtype.FLOAT32)
    np.testing.assert_array_equal(reply.weights, round_trip(arrived * 3, dtype))


def test_a_16_bit_wire_counts_its_lengths_in_16_bit_values():
    with pytest.raises(MalformedMessage, match="not whole bfloat16"):
        values_length(7, 10, WireDtype.BFLOAT16)
    with pytest.raises(MalformedMessage, match="more than 20"):
        values_length(24, 10, WireDtype.FLOAT16)
    assert values_length(20, 10, WireDtype.BFLOAT16) == 10
