"""The proxy case's backend (corpus/manifest.json, nginx-proxy-stalling-backend).

A single-threaded HTTP/1.1 keep-alive server on CPython's asyncio whose
event loop stalls for STALL_MS on one request in ONE_IN (never when 0),
drawn at random:
every request in flight behind it waits too, as behind any single-threaded
backend that stalls. It answers in microseconds otherwise. On SIGTERM it
writes the stalls it made (monotonic times, count) to FACTS as JSON: the
outside truth of the case.

python3 stalling_backend.py PORT STALL_MS ONE_IN SEED FACTS
"""

import asyncio
import json
import random
import signal
import sys
import time

PORT, STALL_MS, ONE_IN, SEED, FACTS = (
    int(sys.argv[1]),
    float(sys.argv[2]),
    int(sys.argv[3]),
    int(sys.argv[4]),
    sys.argv[5],
)
rng = random.Random(SEED)
stalls = []
served = 0
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"


async def serve(reader, writer):
    global served
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            served += 1
            if ONE_IN > 0 and rng.randrange(ONE_IN) == 0:
                stalls.append(time.monotonic())
                time.sleep(STALL_MS / 1000.0)  # blocks the whole loop, on purpose
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", PORT, backlog=1024)
    done = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
    async with server:
        await done.wait()
    with open(FACTS, "w") as f:
        json.dump(
            {"served": served, "stalls": len(stalls), "stall_ms": STALL_MS,
             "one_in": ONE_IN, "stall_times_monotonic": stalls},
            f,
        )


asyncio.run(main())
