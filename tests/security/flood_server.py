"""A real ParameterServer (shard + data plane, no Ray) in its own process, with few file
descriptors left, for tests/security/test_dataplane_flood.py.

argv: spare descriptors, workers, total samples. Prints the endpoint (address, token hex) as
one line, drains the shard as the supervisor would until training is done, then prints the
shard's accounting and the data plane's rejections as one JSON line.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import numpy as np

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.runtime.ray.server import ParameterServer
from syncswitch.runtime.shards import ShardSpec

VALUES = 64


def main() -> None:
    spare, workers, total = (int(a) for a in sys.argv[1:4])
    config = SyncConfig(
        workers=workers, total_samples=total, schedule=Schedule.single(ASP), lr=0.01
    )
    server = ParameterServer(ShardSpec(config, np.zeros(VALUES, np.float32)), host="127.0.0.1")
    server.begin()
    for worker in range(workers):
        server.admit(worker, 0)
    # Few descriptors left: a flood of idle connections exhausts them (EMFILE) at once.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = len(os.listdir("/proc/self/fd")) + spare
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    address, token = server.endpoint()
    print(address, token.hex(), flush=True)
    deadline = time.monotonic() + 60
    while not server.shard.sync.live.done and time.monotonic() < deadline:
        server.drain()
        time.sleep(0.05)
    time.sleep(0.5)  # the last replies go out
    accounting = server.shard.state({}).accounting
    failure = server._endpoint.failure
    print(
        json.dumps(
            {
                "done": server.shard.sync.live.done,
                "accounting": accounting.to_plain(),
                "rejected": server.rejected_messages(),
                "failure": None if failure is None else repr(failure),
            }
        ),
        flush=True,
    )
    server.close()


if __name__ == "__main__":
    main()
