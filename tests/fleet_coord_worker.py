"""One process of a jax.distributed job for the coordination test; prints a JSON report as its last line.

argv: port num_processes process_id shared_folder
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

from xlakit._jax.coordinate import Coordinator  # noqa: E402
from xlakit.store.remote import RemoteStore  # noqa: E402

port, n, me, shared = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=me, initialization_timeout=120)
from jax._src import distributed  # noqa: E402

events: list = []
store = RemoteStore(f"file://{shared}")
coord = Coordinator.from_jax(wait_s=60.0, poll_s=0.1, on_event=events.append)
impatient = Coordinator.from_jax(wait_s=1.0, poll_s=0.1, on_event=events.append)
assert coord is not None and coord.process_id == me
compiled: list[str] = []
values: dict[str, str] = {}


def producer(key: str, seconds: float = 0.3, fail_first: bool = False):
    state = {"tries": 0}

    def produce() -> bytes:
        state["tries"] += 1
        if fail_first and state["tries"] == 1:
            raise ValueError("cannot serialize this program")
        compiled.append(key)
        time.sleep(seconds)  # the compile
        blob = f"executable {key}".encode()
        store.put("cpu", key, blob)  # stored in the shared store before the pointer is published
        return blob

    return produce


def fetch(key: str):
    return lambda: store.get("cpu", key, 1 << 20)


distributed.global_state.client.wait_at_barrier("xlakit-test-start", 120_000)
for key in ("prog0", "prog1", "prog2", "prog3"):
    values[key] = coord.run("cpu", key, fetch=fetch(key), produce=producer(key)).decode()
produce_broken = producer("broken", fail_first=True)
try:
    values["broken"] = coord.run("cpu", "broken", fetch=fetch("broken"), produce=produce_broken).decode()
except ValueError:
    values["broken"] = produce_broken().decode()  # the caller's normal compile after a failed claim
values["slow"] = impatient.run("cpu", "slow", fetch=fetch("slow"), produce=producer("slow", seconds=3.0)).decode()
distributed.global_state.client.wait_at_barrier("xlakit-test-end", 120_000)
print(json.dumps({"me": me, "compiled": compiled, "values": values,
                  "events": [dataclasses.asdict(e) for e in events]}), flush=True)
jax.distributed.shutdown()
