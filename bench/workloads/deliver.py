"""deliver: accept -> DELIVERED through the signed webhook channel to the loopback receiver.

Two runs. *throughput*: 16 closed-loop producers for a bounded window, then we wait
for the receiver to see every accepted notification; delivered/s is arrivals over the
time from the first send to the last arrival (so a dispatcher slower than intake shows
up as queueing, not hidden). *paced*: a low fixed send rate, for the end-to-end latency
of an unloaded system. Latency is send start -> receiver reads the request.
"""

from __future__ import annotations

import itertools
import time

import asyncpg

from bench import client
from bench.config import Profile
from bench.cpu import CpuMeter, Window
from bench.harness import TYPE_DELIVER
from bench.receiver import WebhookReceiver
from bench.stats import Row
from bench.workloads.common import wait_backlog


class _Sender:
    def __init__(self, stub: client.AsyncStub, prefix: str) -> None:
        self.stub = stub
        self.prefix = prefix
        self.sent: dict[str, float] = {}
        self._seq = itertools.count()

    async def __call__(self, _n: int) -> None:
        key = f"{self.prefix}{next(self._seq)}"
        started = time.perf_counter()
        await self.stub.SendNotification(
            client.send_request(TYPE_DELIVER, key, correlation=key),
            metadata=client.METADATA,
            timeout=client.CALL_TIMEOUT_SECONDS,
        )
        self.sent[key] = started


def _row(
    setting: str, sender: _Sender, receiver: WebhookReceiver, window: Window, note: str
) -> Row:
    arrivals = {k: receiver.arrivals[k] for k in sender.sent if k in receiver.arrivals}
    latencies = [(arrivals[k] - sender.sent[k]) * 1000 for k in arrivals]
    first = min(sender.sent.values(), default=0.0)
    last = max(arrivals.values(), default=first)
    missing = len(sender.sent) - len(arrivals)
    if missing:
        note = (note + f"; {missing} not delivered in time").lstrip("; ")
    return Row(
        group="uns",
        name="deliver",
        setting=setting,
        ops=len(arrivals),
        seconds=last - first,
        latencies_ms=latencies,
        server_cpu_s=window.server,
        db_cpu_s=window.db,
        client_cpu_s=window.client,
        note=note,
        extra={"accepted": len(sender.sent), "bad_signatures": receiver.bad_signatures},
    )


async def run(
    target: str,
    db: asyncpg.Connection,
    receiver: WebhookReceiver,
    profile: Profile,
    meter: CpuMeter,
    tag: str,
) -> list[Row]:
    rows: list[Row] = []
    async with client.channel(target) as chan:
        stub = client.stub(chan)
        await wait_backlog(db, 60.0)

        flood = _Sender(stub, f"{tag}-dl-")
        opened = receiver.connections
        meter.start()
        result = await client.closed_loop(
            flood,
            concurrency=profile.deliver_producers,
            seconds=profile.deliver_seconds,
            max_ops=profile.deliver_max,
        )
        await receiver.wait_for(flood.prefix, len(flood.sent), profile.deliver_wait_seconds)
        window = meter.stop()
        note = f"{result.errors} send errors" if result.errors else ""
        row = _row(f"c={profile.deliver_producers}", flood, receiver, window, note)
        accept_rate = result.ops / result.seconds if result.seconds else 0.0
        row.extra["accept_rate"] = accept_rate
        row.extra["connections_opened"] = receiver.connections - opened
        row.note = (
            f"accepted at {accept_rate:.0f}/s, {receiver.connections - opened} connections; "
            + row.note
        ).rstrip("; ")
        rows.append(row)

        await wait_backlog(db, 30.0)
        paced = _Sender(stub, f"{tag}-dp-")
        count = max(1, int(profile.paced_rate * profile.paced_seconds))
        meter.start()
        await client.paced_loop(paced, rate=profile.paced_rate, count=count)
        await receiver.wait_for(paced.prefix, len(paced.sent), 15.0)
        window = meter.stop()
        rows.append(_row(f"paced {profile.paced_rate:g}/s", paced, receiver, window, ""))
    return rows
