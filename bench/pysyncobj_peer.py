"""PySyncObj as the reference Python Raft: three processes on loopback, commits per second.

    python bench/pysyncobj_peer.py SELF PARTNER,PARTNER [--client SECONDS WINDOW SIZE]

Each process is one PySyncObj node replicating a log of opaque payloads. The one started
with --client waits for a leader, keeps WINDOW calls of SIZE-byte payloads in flight for
SECONDS (PySyncObj forwards calls to its leader) and prints one JSON line with the result.
PySyncObj is not a dependency of VDL: `pip install pysyncobj` into the venv to run it.
PySyncObj never fsyncs (its journal is off by default), which favours it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated


class ReplicatedLog(SyncObj):  # type: ignore[misc]
    def __init__(self, self_address: str, partners: list[str]) -> None:
        super().__init__(self_address, partners, SyncObjConf(dynamicMembershipChange=False))
        self.count = 0
        self.size = 0

    @replicated  # type: ignore[untyped-decorator]
    def append(self, payload: bytes) -> int:
        self.count += 1
        self.size += len(payload)
        return self.count


def _client(node: ReplicatedLog, seconds: float, window: int, size: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while node._getLeader() is None:
        if time.monotonic() > deadline:
            return {"error": "no leader"}
        time.sleep(0.05)
    payload = os.urandom(size)
    slots = threading.Semaphore(window)
    done = [0, 0]  # committed, failed

    def on_result(result: object, error: int) -> None:
        done[0 if error == 0 else 1] += 1
        slots.release()

    # Warm up: the first calls pay for connections and leader discovery.
    for _ in range(100):
        slots.acquire()
        node.append(payload, callback=on_result)
    while done[0] + done[1] < 100:
        time.sleep(0.01)
    done[0] = done[1] = 0
    start = time.perf_counter()
    stop = start + seconds
    while time.perf_counter() < stop:
        if slots.acquire(timeout=0.1):
            node.append(payload, callback=on_result)
    elapsed = time.perf_counter() - start
    return {"commits": done[0], "failed": done[1], "seconds": elapsed, "window": window}


def main(argv: list[str]) -> None:
    self_address, partners = argv[0], [p for p in argv[1].split(",") if p]
    node = ReplicatedLog(self_address, partners)
    if len(argv) > 2 and argv[2] == "--client":
        result = _client(node, float(argv[3]), int(argv[4]), int(argv[5]))
        print(json.dumps(result), flush=True)
        node.destroy()
        return
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1:])
