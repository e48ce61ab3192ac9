"""The webhook baseline's child: a bare aiohttp client POSTing signed webhooks in a loop.

What any webhook sender must do per notification, and nothing else: build the same
Standard-Webhooks JSON envelope UNS sends, sign it (HMAC-SHA256), POST it on a kept-alive
connection and read the answer. No database, no gRPC, no retries. Run as a child process
so its CPU is its own::

    python -m bench.baselines.post_loop URL SECRET CONCURRENCY SECONDS MAX_OPS PREFIX

Prints one JSON line: ops, seconds, latencies_ms, errors, first_error and cpu_s (this
process's CPU, user + system, over the loop alone: interpreter start-up is left out).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp

from uns_server.channels.webhook import EVENT_TYPE, sign, signing_key


def body(correlation_id: str, now: float) -> bytes:
    """The envelope of uns_server.channels.webhook.webhook_payload, same fields and sizes."""
    payload: dict[str, Any] = {
        "type": EVENT_TYPE,
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z"),
        "data": {
            "notification_id": str(uuid.uuid4()),
            "notification_type": "bench.deliver",
            "intent": "WARNING",
            "priority": "NORMAL",
            "title": "Disk almost full",
            "message": "92% used on db-1; cleanup job failed twice",
            "source": "bench-producer",
            "correlation_id": correlation_id,
            "metadata": {"host": "db-1", "used_pct": 92, "runbook": "https://runbooks/disk"},
            "attempt": 1,
        },
    }
    return json.dumps(payload, separators=(",", ":")).encode()


async def post_loop(
    url: str, secret: str, concurrency: int, seconds: float, max_ops: int, prefix: str
) -> dict[str, Any]:
    key = signing_key(secret)
    sequence = itertools.count()
    latencies: list[float] = []
    errors: list[str] = []
    cpu0 = time.process_time()
    started = time.perf_counter()
    deadline = started + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while time.perf_counter() < deadline:
                n = next(sequence)
                if n >= max_ops:
                    return
                t0 = time.perf_counter()
                now = time.time()
                content = body(f"{prefix}{n}", now)
                msg_id = f"msg_{uuid.uuid4().hex}"
                headers = {
                    "content-type": "application/json",
                    "webhook-id": msg_id,
                    "webhook-timestamp": str(int(now)),
                    "webhook-signature": sign(key, msg_id, int(now), content),
                }
                try:
                    async with session.post(url, data=content, headers=headers) as reply:
                        await reply.read()
                        reply.raise_for_status()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                latencies.append((time.perf_counter() - t0) * 1000)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        "ops": len(latencies),
        "seconds": time.perf_counter() - started,
        "latencies_ms": latencies,
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "cpu_s": time.process_time() - cpu0,
    }


if __name__ == "__main__":
    url, secret, concurrency, seconds, max_ops, prefix = sys.argv[1:7]
    result = asyncio.run(
        post_loop(url, secret, int(concurrency), float(seconds), int(max_ops), prefix)
    )
    print(json.dumps(result), flush=True)
