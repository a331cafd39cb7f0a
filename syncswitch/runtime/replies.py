"""A shard's replies, as every runtime makes and reads them.

The one reply type is `Reply` (runtime/dataplane/wire.py: the data plane carries it). A shard's
weights are copied once per version (and once more when the workload ends) and that one
read-only copy is shared by every reply of the version, with the data plane's header for it
(`ReplyCache`). The data plane needs no copy: it sends (or writes into shared memory) under
the server's lock, so the live float32 weights cannot change while it reads them. With a
narrower `--wire-dtype` the values are rounded to it: `weights` are the rounded values
widened back to float32 (what every runtime's worker computes on) and `wire` the bytes the
data plane sends (core/sync/wire_dtype.py). A worker joins one reply per shard into the flat
weights it computes on next (`join_replies`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from syncswitch.core.sync.local import LocalRound
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.core.sync.wire_dtype import decode, encode
from syncswitch.runtime.dataplane.wire import Reply, encode_reply

__all__ = ["Pulled", "Reply", "ReplyCache", "join_replies"]


class ReplyCache:
    """One shard's current reply: rebuilt when its version (or `done`) changes, so its
    progress and local round are as of the version's first reply."""

    def __init__(self) -> None:
        self.reply: Reply | None = None
        self.weights = np.empty(0, dtype=np.float32)  # the current reply's (read-only)
        self.wire = self.weights  # the same, as the data plane sends it (--wire-dtype)
        self.header = b""  # the data plane's header for the current reply

    def current(self, sync: Synchronizer, *, decoded: bool = True) -> Reply:
        """The reply of the shard's current version. `decoded=False` (the data plane, which
        sends `wire` and `header` only, holding the server's lock): no float32 copy is made
        yet, and with float32 on the wire `wire` is the live weights themselves."""
        reply = self.reply
        if reply is None or reply.version != sync.live.version or reply.done != sync.live.done:
            weights = sync.optimizer.weights_on_cpu().numpy()
            self.wire = encode(weights, sync.config.wire_dtype)  # float32: `weights` itself
            self.weights = _NOT_COPIED
            local = sync.local_round()
            reply = Reply(sync.live.version, self.weights, sync.live.done, sync.progress, local)
            self.reply = reply
            self.header = encode_reply(sync.live.version, sync.live.done, sync.progress, local)
        if decoded and self.weights is _NOT_COPIED:
            # float32: a copy of the live weights; a 16-bit wire: its values widened (new).
            self.weights = decode(self.wire, sync.config.wire_dtype)
            if self.weights is self.wire:
                self.weights = self.wire = self.wire.copy()
            self.weights.flags.writeable = False
            self.reply = reply = reply._replace(weights=self.weights)
        return reply


_NOT_COPIED = np.empty(0, dtype=np.float32)  # the version's float32 copy, not made yet


class Pulled(NamedTuple):
    """Every shard's reply, joined: what a worker computes its next step on."""

    versions: list[int]  # each shard's: in ASP they may differ, and each slice names its own
    weights: np.ndarray  # the flat weights
    done: bool
    progress: float
    local: LocalRound | None  # every shard computes the same round (they switch in lockstep)


def join_replies(
    replies: Sequence[Reply],
    fetch: Callable[[Any], np.ndarray] | None = None,
    whole: np.ndarray | None = None,
) -> Pulled:
    """One reply per shard, in shard order, joined; `fetch` resolves weights held in a shared
    store ([ref], as Ray returns a large model's). `whole`: the replies' weights already lie
    side by side there (shared memory: dataplane/shared.py), so nothing is concatenated."""
    parts = []
    for reply in replies:
        weights = reply.weights
        if isinstance(weights, list):
            assert fetch is not None, "weights by reference need a fetch"
            weights = fetch(weights[0])
        parts.append(weights)
    flat = whole
    if flat is None:
        flat = parts[0] if len(parts) == 1 else np.concatenate(parts)
    progress = min(r.progress for r in replies)
    done = any(r.done for r in replies)
    return Pulled([r.version for r in replies], flat, done, progress, replies[0].local)
