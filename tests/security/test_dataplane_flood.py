"""Issue 24 case 2: a local process without the token cannot end a run through the data plane.

Idle connections that never send the token are closed after a deadline, at most a bounded
number wait at once, and running out of descriptors (EMFILE) or any other accept error is
counted and backed off from, never the end of the reading thread. The last test floods a real
ParameterServer, in a process with few descriptors, while two workers train to the end.
"""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from syncswitch.runtime.dataplane import ServerEndpoint, WorkerChannel, encode_reply, encode_request
from syncswitch.runtime.dataplane import server as server_module

LOOPBACK = "127.0.0.1"


class Echo:
    def __init__(self) -> None:
        self.endpoint = ServerEndpoint(LOOPBACK, 4, self.handle, clock=time.time)

    def handle(self, identity: int, request) -> None:
        self.endpoint.send(identity, encode_reply(request.sequence, False, 0.0), request.values)


def connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def step(channel: WorkerChannel, sequence: int) -> int:
    header = encode_request(0, 0, sequence, 0, 1, 0.0, 0.0, None)
    [reply] = channel.exchange([(header, np.ones(4, np.float32))])
    return reply.version


def wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_connection_that_never_sends_the_token_is_closed_after_the_deadline(monkeypatch):
    monkeypatch.setattr(server_module, "TOKEN_DEADLINE_S", 0.3)
    echo = Echo()
    try:
        idle = connect(echo.endpoint.address)
        started = time.monotonic()
        assert closed_by_server(idle, within_s=5)
        assert 0.2 < time.monotonic() - started < 3
        assert echo.endpoint.rejected == {"no token in time": 1}
        # A worker that sends its token at once is not affected.
        channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], lambda: True)
        time.sleep(0.5)
        assert step(channel, 7) == 7
        channel.close()
        idle.close()
    finally:
        echo.endpoint.close()


def test_pending_connections_are_bounded_oldest_closed_first(monkeypatch):
    monkeypatch.setattr(server_module, "MAX_PENDING", 4)
    monkeypatch.setattr(server_module, "_ACCEPTS_PER_ROUND", 2)
    echo = Echo()
    try:
        idle = [connect(echo.endpoint.address) for _ in range(10)]
        assert wait_for(
            lambda: echo.endpoint.rejected.get("too many connections without a token") == 6
        )
        assert all(closed_by_server(s, within_s=2) for s in idle[:6])
        assert not any(closed_by_server(s, within_s=0.1) for s in idle[6:])
        channel = WorkerChannel([(echo.endpoint.address, echo.endpoint.token)], lambda: True)
        assert step(channel, 3) == 3
        channel.close()
        for sock in idle:
            sock.close()
    finally:
        echo.endpoint.close()


@pytest.mark.parametrize(
    "code",
    [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED, errno.EPERM],
)
def test_an_accept_error_is_counted_and_the_server_serves_on(monkeypatch, code):
    class FlakyListener(socket.socket):
        """A listening socket whose accept fails three times before it works."""

        failures_left = 3

        def accept(self):
            if FlakyListener.failures_left:
                FlakyListener.failures_left -= 1
                raise OSError(code, "injected")
            return super().accept()

    def flaky_listening_socket(host: str) -> socket.socket:
        listener = FlakyListener(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((host, 0))
        listener.listen(16)
        listener.setblocking(False)
        return listener

    monkeypatch.setattr(server_module, "_listening_socket", flaky_listening_socket)
    echo = Echo()
    endpoint = echo.endpoint
    try:
        channels = [
            WorkerChannel([(endpoint.address, endpoint.token)], lambda: True) for _ in range(3)
        ]
        assert [step(c, 5) for c in channels] == [5, 5, 5]
        assert endpoint.failure is None
        assert endpoint.rejected == {f"accept failed: {errno.errorcode[code]}": 3}
        for channel in channels:
            channel.close()
    finally:
        endpoint.close()


def test_a_flood_of_idle_connections_does_not_end_a_real_run():
    """About 600 idle connections (loopback only, bounded) against a server process with ~20
    descriptors to spare, while two workers train to the end: 0 unaccounted."""
    workers, total = 2, 3000
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.security.flood_server", "20", str(workers), str(total)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    flood: list[socket.socket] = []
    try:
        address, token_hex = server.stdout.readline().split()
        token = bytes.fromhex(token_hex)
        for _ in range(300):  # at once: far more than the server has descriptors for
            flood.append(connect(address))
        stop = threading.Event()

        def keep_flooding() -> None:
            while not stop.is_set() and len(flood) < 600:
                flood.append(connect(address))
                time.sleep(0.005)

        flooder = threading.Thread(target=keep_flooding)
        flooder.start()
        versions: dict[int, int] = {}

        def train(worker: int) -> None:
            channel = WorkerChannel([(address, token)], lambda: True)
            version, sequence = 0, 0
            while True:
                header = encode_request(worker, 0, sequence, version, 32, 1.0, 0.001, None)
                [reply] = channel.exchange([(header, np.full(64, 1e-3, np.float32))])
                version, sequence = reply.version, sequence + 1
                if reply.done:
                    break
            versions[worker] = version
            channel.close()

        threads = [threading.Thread(target=train, args=(w,)) for w in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        stop.set()
        flooder.join()
        out, err = server.communicate(timeout=60)
    finally:
        for sock in flood:
            sock.close()
        if server.poll() is None:
            server.kill()
    result = json.loads(out.strip().splitlines()[-1])
    assert len(versions) == workers, err[-2000:]
    assert result["done"] and result["failure"] is None, err[-2000:]
    assert result["accounting"]["unaccounted"] == 0
    assert result["accounting"]["applied"] >= total // 32
    rejected = result["rejected"]
    assert rejected.get("accept failed: EMFILE", 0) > 0  # the descriptors did run out
    closed = sum(v for k, v in rejected.items() if not k.startswith("accept failed"))
    assert closed > 0
    assert "Traceback" not in err
