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
- a request: u32 byte length of the values, a 64-byte header (`encode_request`), the raw
  values (a gradient, or in a local phase a delta: the same size) in the job's
  `--wire-dtype` (float32, or bfloat16/float16 as 16-bit words: core/sync/wire_dtype.py);
- a reply: u32 byte length of the weights, a 62-byte header (`encode_reply`: the version,
  in a local phase the worker's next round, and under an emulated servers' link the time
  the reply has crossed it), the weights in the same dtype.

The server reads every connection without blocking on one thread that owns the reading
(`selectors`), holds an emulated gradient until its step ends (and it has crossed an
emulated servers' link), and calls the handler; any thread may answer with `send`. A wrong
token, a length over the shard's size or values that are not whole values of the wire's
dtype close the connection before anything is allocated for it, and are counted. A
connection that does not send the token within 3 s is closed, at most 64 wait for it at
once, and no accept or recv error (descriptors exhausted included) ends the run
(server.py). A worker waits for its replies in slices of `PROBE_S`; between slices (and
when a connection closes) it asks its `probe` (a Ray call) whether the servers are alive,
so a dead server ends the worker's run as a failed Ray call did before.

Nothing here imports Ray: the wire format and both ends are tested without it.
"""

from syncswitch.runtime.dataplane.client import WorkerChannel
from syncswitch.runtime.dataplane.server import ServerEndpoint
from syncswitch.runtime.dataplane.wire import (
    PROBE_S,
    TOKEN_BYTES,
    MalformedMessage,
    Reply,
    Request,
    decode_request,
    encode_reply,
    encode_request,
    values_length,
)

__all__ = [
    "PROBE_S",
    "TOKEN_BYTES",
    "MalformedMessage",
    "Reply",
    "Request",
    "ServerEndpoint",
    "WorkerChannel",
    "decode_request",
    "encode_reply",
    "encode_request",
    "values_length",
]
