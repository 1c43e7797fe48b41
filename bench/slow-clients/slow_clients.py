"""Slow, unauthenticated clients against a live quiesce, beside one signed, authenticated sender.

Keeps SLOW connections open for the whole run, re-opening each one the server closes (a patient
attacker): a third stall an upload to a source that does not exist (Content-Length 1000, one byte
sent), a third stall an upload to /v1/events without a token, a third trickle header lines, one
every 3 s. Meanwhile one authenticated sender posts a correctly signed event every 0.25 s on a
fresh connection. Prints a JSON report: the sender's statuses and latencies, and how the slow
connections ended. Standard library only.
"""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import sys
import time

HOST, PORT = sys.argv[1], int(sys.argv[2])
TOKEN, SECRET = sys.argv[3], sys.argv[4]
SLOW = int(os.environ.get("SLOW", "600"))
SECONDS = float(os.environ.get("SECONDS_RUN", "60"))

ends = {}
opened = 0


def note(kind):
    ends[kind] = ends.get(kind, 0) + 1


async def read_status(reader):
    line = await reader.readline()
    if not line:
        return "closed"
    parts = line.split(b" ")
    return parts[1].decode() if len(parts) > 1 else "garbage"


async def stalled_upload(path, stop):
    global opened
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(HOST, PORT)
        except OSError:
            note("connect failed")
            await asyncio.sleep(0.5)
            continue
        opened += 1
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\ncontent-type: application/json\r\n"
            "content-length: 1000\r\n\r\n["
        )
        writer.write(head.encode())
        await writer.drain()
        started = time.monotonic()
        try:
            status = await asyncio.wait_for(read_status(reader), timeout=SECONDS + 30)
        except (asyncio.TimeoutError, OSError):
            status = "held open"
        note(f"{path}: {status} after {round(time.monotonic() - started)} s")
        writer.close()


async def trickle(stop):
    global opened
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(HOST, PORT)
        except OSError:
            note("connect failed")
            await asyncio.sleep(0.5)
            continue
        opened += 1
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: {HOST}\r\n".encode())
        started = time.monotonic()
        i = 0
        outcome = "held open"
        while not stop.is_set():
            try:
                chunk = await asyncio.wait_for(reader.read(4096), timeout=3)
                if not chunk:
                    outcome = "closed"
                    break
            except asyncio.TimeoutError:
                pass
            except OSError:
                outcome = "closed"
                break
            try:
                writer.write(f"x-trickle-{i}: 1\r\n".encode())
                await writer.drain()
            except OSError:
                outcome = "closed"
                break
            i += 1
        note(f"header trickle: {outcome} after {round(time.monotonic() - started)} s")
        writer.close()


def signed(body):
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    msg_id = f"msg_{time.time_ns()}"
    stamp = str(int(time.time()))
    mac = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    return msg_id, stamp, "v1," + base64.b64encode(mac).decode()


async def sender(stop, results):
    n = 0
    while not stop.is_set():
        n += 1
        body = json.dumps(
            {"id": f"edge-{os.getpid()}-{n}", "entity": f"post:edge-{n % 50}", "type": "flag",
             "actor": "user:edge"}
        ).encode()
        msg_id, stamp, signature = signed(body)
        head = (
            f"POST /v1/events HTTP/1.1\r\nHost: {HOST}\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {TOKEN}\r\nwebhook-id: {msg_id}\r\nwebhook-timestamp: {stamp}\r\n"
            f"webhook-signature: {signature}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        started = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, PORT), 10)
            writer.write(head.encode() + body)
            await writer.drain()
            status = await asyncio.wait_for(read_status(reader), timeout=10)
            writer.close()
        except (asyncio.TimeoutError, OSError) as error:
            status = f"error: {type(error).__name__}"
        results.append((status, (time.monotonic() - started) * 1000))
        await asyncio.sleep(0.25)


async def main():
    stop = asyncio.Event()
    results = []
    third = SLOW // 3
    tasks = [asyncio.create_task(stalled_upload("/v1/sources/nosuch/events", stop)) for _ in range(third)]
    tasks += [asyncio.create_task(stalled_upload("/v1/events", stop)) for _ in range(third)]
    tasks += [asyncio.create_task(trickle(stop)) for _ in range(SLOW - 2 * third)]
    await asyncio.sleep(2)  # the slow connections are open before the sender starts
    send = asyncio.create_task(sender(stop, results))
    await asyncio.sleep(SECONDS)
    stop.set()
    await send
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    latencies = sorted(ms for status, ms in results if status == "202")
    statuses = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1

    def pick(q):
        return round(latencies[min(int(q * len(latencies)), len(latencies) - 1)], 1) if latencies else None

    print(json.dumps({
        "slow_connections_at_once": SLOW,
        "slow_connections_opened": opened,
        "seconds": SECONDS,
        "authenticated_requests": len(results),
        "authenticated_statuses": statuses,
        "authenticated_latency_ms": {"p50": pick(0.5), "p99": pick(0.99), "max": pick(1.0)},
        "slow_connection_ends": dict(sorted(ends.items(), key=lambda kv: -kv[1])[:12]),
    }, indent=2))


asyncio.run(main())
