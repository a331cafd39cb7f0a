"""The data plane's wire format and both ends, without Ray (real ZeroMQ sockets on loopback)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zmq

from syncswitch.runtime.dataplane import (
    MalformedMessage,
    Request,
    ServerEndpoint,
    WorkerChannel,
    decode_request,
    encode_reply,
    encode_request,
)

LOOPBACK = "127.0.0.1"


class Echo:
    """A server handler that answers every request at once with version = its sequence."""

    def __init__(self, values_len: int, answer: bool = True) -> None:
        self.endpoint = ServerEndpoint(LOOPBACK, values_len, self.handle, clock=time.time)
        self.seen: list[tuple[float, Request]] = []
        self.answer = answer
        self.identities: list[bytes] = []

    def handle(self, identity: bytes, request: Request) -> None:
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
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: None)
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
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: None)
    [reply] = channel.exchange([(_request(sequence=4), np.ones(3, np.float32))])
    channel.close()
    assert reply.version == 4 and echo.seen[0][1].values.shape == (3,)


def test_the_server_binds_where_it_is_told_only(echo):
    assert echo.endpoint.address.startswith(f"tcp://{LOOPBACK}:")


def test_each_server_answers_its_own_slice():
    servers = [Echo(2), Echo(3)]
    try:
        channel = WorkerChannel(
            [(s.endpoint.address, s.endpoint.token) for s in servers], probe=lambda: None
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


def _raw_dealer(address: str) -> zmq.Socket:
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(address)
    return socket


def _wait_for(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([b"x" * 16, _request(), np.zeros(4, np.float32).tobytes()], "wrong token"),
        ([_request(), np.zeros(4, np.float32).tobytes()], "2 frames"),
        (["TOKEN", b"short", np.zeros(4, np.float32).tobytes()], "header of 5 bytes"),
        (["TOKEN", _request(), b"\0" * 13], "13 bytes of values"),
    ],
)
def test_a_bad_message_is_dropped_unread_and_counted(echo, frames, reason):
    frames = [echo.endpoint.token if f == "TOKEN" else f for f in frames]
    socket = _raw_dealer(echo.endpoint.address)
    socket.send_multipart(frames)
    _wait_for(lambda: echo.endpoint.rejected)
    socket.close()
    assert not echo.seen
    [(counted, times)] = echo.endpoint.rejected.items()
    assert reason in counted and times == 1


def test_an_oversized_message_is_refused_and_the_server_serves_on(echo):
    intruder = _raw_dealer(echo.endpoint.address)
    intruder.send_multipart([echo.endpoint.token, _request(), b"\0" * (1 << 20)])
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: None)
    [reply] = channel.exchange([(_request(sequence=3), np.ones(4, np.float32))])
    channel.close()
    intruder.close()
    assert reply.version == 3
    assert [r.sequence for _, r in echo.seen] == [3]  # the 1 MiB message never reached it


def test_emulated_steps_count_as_arrived_when_they_end_in_that_order(echo):
    echo.answer = False
    socket = _raw_dealer(echo.endpoint.address)
    now = time.time()
    for sequence, delay_s in [(0, 0.15), (1, 0.05), (2, 0.0)]:
        socket.send_multipart(
            [
                echo.endpoint.token,
                _request(sequence, ready_at=now + delay_s if delay_s else None),
                np.zeros(4, np.float32).tobytes(),
            ]
        )
    _wait_for(lambda: len(echo.seen) == 3)
    socket.close()
    assert [r.sequence for _, r in echo.seen] == [2, 1, 0]
    for seen_at, request in echo.seen:
        if request.ready_at is not None:
            assert seen_at >= request.ready_at
            assert seen_at - request.ready_at < 0.03  # held no longer than it must be


def test_a_reply_from_another_thread_wakes_the_socket_thread(echo):
    echo.answer = False  # left waiting, as at a BSP barrier
    channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], probe=lambda: None)

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

    def probe() -> None:
        probes.append(time.time())
        if len(probes) == 2:
            raise ConnectionError("server died")

    channel = WorkerChannel(
        [(echo.endpoint.address, echo.endpoint.token)], probe=probe, probe_s=0.05
    )
    with pytest.raises(ConnectionError, match="server died"):
        channel.exchange([(_request(), np.ones(4, np.float32))])
    channel.close()
    assert len(probes) == 2


def test_decoding_checks_sizes_before_reading():
    with pytest.raises(MalformedMessage, match="header"):
        decode_request(b"\0" * 3, b"", 0)
    with pytest.raises(
        MalformedMessage, match="8 bytes of values, expected a multiple of 4 up to 4"
    ):
        decode_request(_request(), b"\0" * 8, 1)
    request = decode_request(_request(ready_at=12.5), np.ones(1, np.float32).tobytes(), 1)
    assert request.ready_at == 12.5
