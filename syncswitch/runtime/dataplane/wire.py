"""The data plane's wire format: message framing, request and reply headers, and the socket
helpers both ends use (see the package docstring for the format)."""

from __future__ import annotations

import math
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from syncswitch.core.sync.local import LocalRound
from syncswitch.core.sync.wire_dtype import WireDtype

TOKEN_BYTES = 16
PROBE_S = 1.0  # a worker waiting longer than this asks whether its servers are alive

LENGTH = struct.Struct("<I")
# worker, incarnation, sequence, computed_version, samples, loss, step_time_s, ready_at,
# local_steps (0: a gradient; H: a local phase's delta after H steps), norm (the whole
# gradient's, when the run clips: core/sync/clipping.py; NaN: not measured)
REQUEST = struct.Struct("<iiqqidddid")
# version, done, progress, then the worker's local round (steps 0: none): steps, lr,
# momentum, weight_decay, epoch, keep_inner_state; last, the wall time at which the reply has
# crossed the server's emulated link (NaN: no such link), which the sending endpoint stamps
REPLY = struct.Struct("<qBdidddqBd")
_LINK_UNTIL = struct.Struct("<d")


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
    values: np.ndarray  # float32 (widened from --wire-dtype), the server's own writable buffer
    local_steps: int = 0  # a local phase's delta after this many steps (0: a gradient)
    norm: float | None = None  # the whole gradient's L2 norm, when the run clips


class Reply(NamedTuple):
    """What one shard sends a worker: every runtime's reply (over the data plane, from a Ray
    call, as a simulator's event); runtime/replies.py caches and joins them."""

    version: int
    # float32: over the data plane the worker's own buffer; from a shard, one read-only copy
    # per version shared by its replies; from a Ray call on a large model, [ObjectRef].
    weights: np.ndarray | list[Any]
    done: bool
    progress: float  # fraction of the training samples applied (emulated stragglers use it)
    local: LocalRound | None = None  # the worker's next round in a local phase
    link_until: float | None = None  # emulation: when it has crossed the server's link


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
    local_steps: int = 0,
    norm: float | None = None,
) -> bytes:
    """The fixed-size header of a request (the values follow it as they are)."""
    return REQUEST.pack(
        worker,
        incarnation,
        sequence,
        computed_version,
        samples,
        loss,
        step_time_s,
        math.nan if ready_at is None else ready_at,
        local_steps,
        math.nan if norm is None else norm,
    )


def decode_request(header: bytes | bytearray | memoryview, values: np.ndarray) -> Request:
    worker, incarnation, sequence, version, samples, loss, step_s, ready_at, local_steps, norm = (
        REQUEST.unpack(header)
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
        local_steps=max(local_steps, 0),
        # NaN stands for "not measured"; a non-finite norm a worker measured is +inf here,
        # so every shard drops its gradient alike (core/sync/gate.py).
        norm=None if math.isnan(norm) else norm,
    )


def values_length(byte_length: int, max_values: int, dtype: WireDtype = WireDtype.FLOAT32) -> int:
    """How many values of `dtype` a request announcing `byte_length` bytes carries, checked
    before anything is allocated. The count is not checked against the shard's size here: a
    gradient of the wrong shape is the synchronizer's to count and drop (and to quarantine
    its sender for); the transport only bounds it."""
    size = dtype.itemsize
    if byte_length % size:
        raise MalformedMessage(f"{byte_length} bytes of values: not whole {dtype.value}")
    if byte_length > max_values * size:
        raise MalformedMessage(f"{byte_length} bytes of values: more than {max_values * size}")
    return byte_length // size


def encode_reply(
    version: int, done: bool, progress: float, local: LocalRound | None = None
) -> bytes:
    if local is None:
        return REPLY.pack(version, done, progress, 0, 0.0, 0.0, 0.0, 0, False, math.nan)
    return REPLY.pack(
        version,
        done,
        progress,
        local.steps,
        local.lr,
        local.momentum,
        local.weight_decay,
        local.epoch,
        local.keep_inner_state,
        math.nan,
    )


def with_link_until(header: bytes, until: float) -> bytes:
    """A reply's header stamped with the time it has crossed the server's emulated link."""
    return header[: -_LINK_UNTIL.size] + _LINK_UNTIL.pack(until)


def decode_reply(
    header: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[int, bool, float, LocalRound | None, float | None]:
    """(version, done, progress, local round, link_until) from a reply's header."""
    version, done, progress, steps, lr, momentum, decay, epoch, keep, until = REPLY.unpack_from(
        header, offset
    )
    local = None
    if steps > 0:
        local = LocalRound(steps, lr, momentum, decay, epoch, bool(keep))
    return version, bool(done), progress, local, None if math.isnan(until) else until


def no_delay(sock: socket.socket) -> None:
    # Each message is written at once; Nagle's algorithm would hold its tail for an ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def send_buffers(sock: socket.socket, buffers: list, on_block: Callable[[], None]) -> None:
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
