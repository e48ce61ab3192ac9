"""deliver: accept -> DELIVERED through the signed webhook channel to the loopback receiver.

Two runs. *throughput*: 16 closed-loop producers for a bounded window, then we wait
for the receiver to see every accepted notification; delivered/s is arrivals over the
time from the first send to the last arrival (so a dispatcher slower than intake shows
up as queueing, not hidden). *paced*: a low fixed send rate, for the end-to-end latency
of an unloaded system. Latency is send start -> receiver reads the request.
"""

from __future__ import annotations

import contextlib
import itertools
import time

from bench import client
from bench.config import Profile
from bench.cpu import Window
from bench.harness import TYPE_DELIVER
from bench.receiver import WebhookReceiver
from bench.stats import Row
from bench.workloads.common import Contestant, schedule, wait_backlog


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
    contestants: list[Contestant],
    receiver: WebhookReceiver,
    profile: Profile,
    tag: str,
    rounds: int = 1,
) -> list[Row]:
    """Both runs on every contestant, ``rounds`` times each, interleaved."""
    rows: list[Row] = []
    async with contextlib.AsyncExitStack() as stack:
        stubs = []
        for k in contestants:
            stubs.append(client.stub(await stack.enter_async_context(client.channel(k.target))))
        for round_no, i in schedule(len(contestants), rounds):
            k = contestants[i]
            await wait_backlog(k.db, 60.0)
            flood = _Sender(stubs[i], f"{tag}-dl-{_suffix(k, round_no)}")
            opened = receiver.connections
            k.meter.start()
            result = await client.closed_loop(
                flood,
                concurrency=profile.deliver_producers,
                seconds=profile.deliver_seconds,
                max_ops=profile.deliver_max,
            )
            await receiver.wait_for(flood.prefix, len(flood.sent), profile.deliver_wait_seconds)
            window = k.meter.stop()
            note = f"{result.errors} send errors" if result.errors else ""
            row = _row(f"c={profile.deliver_producers}", flood, receiver, window, note)
            accept_rate = result.ops / result.seconds if result.seconds else 0.0
            row.extra["accept_rate"] = accept_rate
            row.extra["connections_opened"] = receiver.connections - opened
            row.note = (
                f"accepted at {accept_rate:.0f}/s, {receiver.connections - opened} connections; "
                + row.note
            ).rstrip("; ")
            rows.append(k.mark(row, round_no))

        for round_no, i in schedule(len(contestants), rounds):
            k = contestants[i]
            await wait_backlog(k.db, 30.0)
            paced = _Sender(stubs[i], f"{tag}-dp-{_suffix(k, round_no)}")
            count = max(1, int(profile.paced_rate * profile.paced_seconds))
            k.meter.start()
            await client.paced_loop(paced, rate=profile.paced_rate, count=count)
            await receiver.wait_for(paced.prefix, len(paced.sent), 15.0)
            window = k.meter.stop()
            row = _row(f"paced {profile.paced_rate:g}/s", paced, receiver, window, "")
            rows.append(k.mark(row, round_no))
    return rows


def _suffix(contestant: Contestant, round_no: int) -> str:
    """Key prefixes apart per window, so the receiver counts each window's own (a
    repeated key would be an idempotent replay, delivered once, in an earlier window)."""
    return f"{contestant.tree or 'round'}{round_no}-"
