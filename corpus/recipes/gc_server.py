"""The CPython garbage-collection case's server (corpus/manifest.json, cpython-gc).

A single-threaded HTTP/1.1 keep-alive server on Debian's CPython (asyncio)
that keeps a large graph of objects with reference cycles alive, as a
cache or a session table would, and runs a full collection (gc.collect())
on its serving thread every PERIOD_MS: every request that arrives meanwhile
waits for the collector, which walks the whole graph. It answers in
microseconds otherwise. Every collection (the periodic ones and any the
interpreter starts itself) is timed by the interpreter's own gc.callbacks;
on SIGTERM they go to FACTS as JSON (CLOCK_MONOTONIC ns): the outside
truth of the case. Each collection also carries the serving thread's CPU
time and run-queue wait over it, by the kernel's own accounting: its CPU
time (CLOCK_THREAD_CPUTIME_ID, exact for a running thread; it excludes steal
on a paravirt kernel and, without IRQ time accounting, includes the IRQs
that hit the thread) and its run-queue wait (/proc/thread-self/schedstat):
[start, end, generation, cpu_ns, run_delay_ns].

/usr/bin/python3 gc_server.py PORT OBJECTS PERIOD_MS FACTS
"""

import asyncio
import gc
import json
import signal
import sys
import time

PORT, OBJECTS, PERIOD_MS, FACTS = (
    int(sys.argv[1]),
    int(sys.argv[2]),
    float(sys.argv[3]),
    sys.argv[4],
)
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"

# The graph: OBJECTS small dicts, each in a two-object cycle, so that only
# the cycle collector could ever free them and a full collection walks all.
graph = []
for i in range(OBJECTS // 2):
    a, b = {"id": i}, {"id": -i}
    a["peer"], b["peer"] = b, a
    graph.append(a)

collections = []
started = {}


def schedstat():
    """The calling thread's (time on the CPU, time waiting on a run queue), ns."""
    with open("/proc/thread-self/schedstat") as f:
        delay = int(f.read().split()[1])
    return time.thread_time_ns(), delay


def timed(phase, info):
    now = time.monotonic_ns()
    if phase == "start":
        started["cpu"] = schedstat()
        started["at"] = time.monotonic_ns()
    elif "at" in started:
        cpu, delay = schedstat()
        cpu0, delay0 = started.pop("cpu")
        collections.append(
            [started.pop("at"), now, info["generation"], cpu - cpu0, delay - delay0]
        )


gc.callbacks.append(timed)
served = 0


async def serve(reader, writer):
    global served
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            served += 1
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def collect(loop):
    gc.collect()
    loop.call_later(PERIOD_MS / 1000.0, collect, loop)


def finish(*_):
    with open(FACTS, "w") as f:
        json.dump({"served": served, "collections": collections}, f)
    sys.exit(0)


async def main():
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, finish)
    server = await asyncio.start_server(serve, "127.0.0.1", PORT, backlog=1024)
    loop.call_later(PERIOD_MS / 1000.0, collect, loop)
    async with server:
        await server.serve_forever()


asyncio.run(main())
