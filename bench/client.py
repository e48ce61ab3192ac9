"""The load generator: request shapes and a bounded closed loop / paced loop.

The same loop drives UNS and the bare echo server, so their figures differ only by
what the server does.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
from google.protobuf import struct_pb2

from bench.harness import API_KEY
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2

METADATA = (("authorization", f"Bearer {API_KEY}"),)
CALL_TIMEOUT_SECONDS = 30.0
# Separate connections for large stream counts (one HTTP/2 connection each).
OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)


if TYPE_CHECKING:
    AsyncStub = pb_grpc.NotificationServiceAsyncStub


def send_request(
    notification_type: str, key: str, correlation: str = ""
) -> pb.SendNotificationRequest:
    """A realistic producer request: a warning with a little metadata, a unique key."""
    metadata = struct_pb2.Struct()
    metadata.update({"host": "db-1", "used_pct": 92, "runbook": "https://runbooks/disk"})
    return pb.SendNotificationRequest(
        notification_type=notification_type,
        intent=types_pb2.NOTIFICATION_INTENT_WARNING,
        title="Disk almost full",
        message="92% used on db-1; cleanup job failed twice",
        source="bench-producer",
        idempotency_key=key,
        correlation_id=correlation or key,
        metadata=metadata,
    )


def channel(target: str, *, own_connection: bool = False) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(target, options=OWN_CONNECTION if own_connection else None)


def stub(chan: grpc.aio.Channel) -> AsyncStub:
    return pb_grpc.NotificationServiceStub(chan)


@dataclass
class LoadResult:
    ops: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""


Call = Callable[[int], Awaitable[object]]


async def closed_loop(
    call: Call,
    *,
    concurrency: int,
    seconds: float,
    max_ops: int,
    start_index: int = 0,
) -> LoadResult:
    """``concurrency`` workers call back to back until time or ``max_ops`` runs out."""
    result = LoadResult()
    counter = itertools.count(start_index)
    last = start_index + max_ops
    started = time.perf_counter()
    deadline = started + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            n = next(counter)
            if n >= last:
                return
            t0 = time.perf_counter()
            try:
                await call(n)
            except Exception as exc:  # counted, never fatal: a bench reports, it does not crash
                result.errors += 1
                result.first_error = result.first_error or f"{type(exc).__name__}: {exc}"[:300]
                continue
            result.latencies_ms.append((time.perf_counter() - t0) * 1000)
            result.ops += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result


async def paced_loop(call: Call, *, rate: float, count: int, start_index: int = 0) -> LoadResult:
    """Open loop: start one call every ``1/rate`` s regardless of completions."""
    result = LoadResult()
    started = time.perf_counter()

    async def one(n: int) -> None:
        t0 = time.perf_counter()
        try:
            await call(n)
        except Exception as exc:
            result.errors += 1
            result.first_error = result.first_error or f"{type(exc).__name__}: {exc}"[:300]
            return
        result.latencies_ms.append((time.perf_counter() - t0) * 1000)
        result.ops += 1

    tasks = []
    for i in range(count):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(start_index + i)))
    await asyncio.gather(*tasks)
    result.seconds = time.perf_counter() - started
    return result
