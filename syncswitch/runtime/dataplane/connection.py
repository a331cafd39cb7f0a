"""One worker's connection as the server reads it (server.py owns the reading thread)."""

from __future__ import annotations

import secrets
import socket

import numpy as np

from syncswitch.core.sync.wire_dtype import WireDtype, decode
from syncswitch.runtime.dataplane.shared import ATTACH_MARK, Declined, SharedRegions, attach
from syncswitch.runtime.dataplane.wire import (
    LENGTH,
    REQUEST,
    TOKEN_BYTES,
    MalformedMessage,
    Request,
    decode_request,
    values_length,
)


class Connection:
    """One worker's connection as the server reads it, message by message, never blocking:
    the token first, then per request its length and header, then its values (unless they
    are in shared memory: an offer, at most one, may come before the first request)."""

    _HEAD = LENGTH.size + REQUEST.size

    def __init__(
        self, sock: socket.socket, ident: int, dtype: WireDtype = WireDtype.FLOAT32
    ) -> None:
        self.sock = sock
        self.ident = ident
        self.dtype = dtype  # of the values on the wire (--wire-dtype)
        self.admitted = False
        self._head = bytearray(max(TOKEN_BYTES, self._HEAD))
        self._values: np.ndarray | None = None
        self._target = memoryview(self._head)[:TOKEN_BYTES]
        self._got = 0
        self.shared: SharedRegions | None = None  # attached: values come and go through it
        self.offered = False
        self.answer: bytes | None = None  # to an offer, not sent yet: b"\x01" attached
        self.declined: str | None = None  # why an offer was not attached

    def read(self, token: bytes, max_values: int) -> list[Request]:
        """Every complete request now readable (reading stops after an offer, which the
        endpoint answers first). Raises EOFError when the worker closed the connection,
        MalformedMessage when it broke the protocol."""
        complete: list[Request] = []
        while self.answer is None:
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
        return complete

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
            if length == ATTACH_MARK:
                self._attach(bytes(head[LENGTH.size : self._HEAD]), max_values)
                self._expect(head[: self._HEAD])
                return None
            count = values_length(length, max_values, self.dtype)
            if self.shared is not None:
                # The worker wrote them before the header; it waits for the reply.
                values = decode(self.shared.request[:count], self.dtype)
                self._expect(head[: self._HEAD])
                return decode_request(head[LENGTH.size : self._HEAD], values)
            # Its own buffer per request: the synchronizer may keep the gradient (a barrier).
            self._values = np.empty(count, dtype=self.dtype.raw_numpy)
            if length:
                self._expect(self._values.data.cast("B"))
                return None
        values = decode(self._values, self.dtype)  # float32: itself, or a widened copy
        request = decode_request(head[LENGTH.size : self._HEAD], values)
        self._values = None
        self._expect(head[: self._HEAD])
        return request

    def _expect(self, target: memoryview) -> None:
        self._target, self._got = target, 0

    def _attach(self, offer: bytes, max_values: int) -> None:
        if self.offered:
            raise MalformedMessage("shared memory offered twice")
        self.offered = True
        try:
            self.shared = attach(offer, max_values, self.dtype)
        except Declined as reason:
            self.declined = str(reason)
        self.answer = b"\x01" if self.shared is not None else b"\x00"
