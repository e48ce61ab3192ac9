"""Isolation between channels (issue 41 item 2), through a real server and loopback
receivers: a provider that hangs holds no more than its bulkhead's delivery slots, so
another channel's delivery still goes out; a provider's 429 defers the work without
spending an attempt, a bounded number of times per cycle.

Nothing here measures time: the bulkhead test asserts what is stuck and what is
delivered when the healthy delivery lands; the 429 tests step the dispatcher with a
movable clock (a deferral's due time is read, then the clock moved past it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.settings import DISPATCH_CHANNEL_CONCURRENCY_DEFAULT

SECRET = "whsec_cGxhbnRlZC1zZWNyZXQtdmFsdWUtMTIzNDU="
STUCK_SENDS = 60
# Long enough that no hanging call ends while a test runs (the call is cut at 80 %).
LONG_LEASE_SECONDS = 600.0


def _hook(name: str, receiver: HttpReceiver) -> str:
    return (
        f"{name}:\n  type: webhook\n  url: {receiver.url('/' + name)}\n  secret: {SECRET}\n"
        "  timeout_seconds: 300\n"
    )


async def _get(server: RunningServer, notification_id: str) -> t.Notification:
    reply = await server.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=notification_id)
    )
    return reply.notification


async def _send(server: RunningServer, notification_type: str, key: str) -> str:
    sent = await server.stub("alice").SendNotification(
        send_request(notification_type=notification_type, idempotency_key=key)
    )
    return str(sent.notification_id)


async def test_a_hanging_channel_leaves_a_healthy_channel_its_slots(
    db_url: str, tmp_path: Path
) -> None:
    """60 deliveries to a receiver that accepts and never answers, then one to a healthy
    channel, with the default slots (32) and bulkhead (16): the healthy one is
    delivered while the hanging ones are all still in flight or waiting, unsettled."""
    async with HttpReceiver() as stuck, HttpReceiver() as healthy:
        stuck.default = Reply(action="hang")
        channels = tmp_path / "channels.yaml"
        channels.write_text(_hook("stuck", stuck) + _hook("healthy", healthy))
        for name, names in (
            ("ops.stuck", ["stuck"]),
            ("ops.healthy", ["healthy"]),
            ("ops.both", ["stuck", "healthy"]),
        ):
            await activate_policy(
                db_url,
                name,
                channels=names,
                delivery_mode=DeliveryMode.GUARANTEED,
                require_ack=False,
                max_attempts=3,
            )
        server = await start_server(
            db_url, tmp_path, channels_file=str(channels), lease_seconds=LONG_LEASE_SECONDS
        )
        try:
            limit = DISPATCH_CHANNEL_CONCURRENCY_DEFAULT
            assert server.app.dispatcher.bulkheads.limit == limit
            stuck_ids = [await _send(server, "ops.stuck", f"stuck-{i}") for i in range(STUCK_SENDS)]
            await stuck.wait_for_requests(limit, within_seconds=60)  # the bulkhead is full
            # One obligation over both channels waits whole while one of them is full.
            both = await _send(server, "ops.both", "both")
            ok = await _send(server, "ops.healthy", "healthy")
            events = await events_until(
                server.stub("oscar"),
                pb.WatchEventsRequest(replay_history=True, notification_ids=[ok]),
                lambda evs: bool(evs) and evs[-1].kind == t.EVENT_KIND_DELIVERY_RESULT,
                within=60,
            )
            assert events[-1].payload["status"] == "DELIVERED"
            assert len(healthy.requests) == 1
            # ... while every hanging delivery is still stuck: none settled, only the
            # bulkhead's worth ever sent, the rest unclaimed with no attempt spent.
            assert len(stuck.requests) == limit
            rows = [await _get(server, nid) for nid in stuck_ids]
            assert {r.state for r in rows} == {t.NOTIFICATION_STATE_PENDING}
            spent = sorted(r.cycle_attempts for r in rows)
            assert spent == [0] * (STUCK_SENDS - limit) + [1] * limit
            assert all(not r.outcome.channels_attempted for r in rows)  # nothing settled
            assert (await _get(server, ok)).state == t.NOTIFICATION_STATE_DELIVERED
            waiting = await _get(server, both)
            assert (waiting.state, waiting.cycle_attempts) == (t.NOTIFICATION_STATE_PENDING, 0)
            assert [r.json()["data"]["notification_id"] for r in healthy.requests] == [ok]
        finally:
            await stuck.stop()  # the hanging calls fail now, and settle before the stop
            await server.stop()


@dataclass
class Rig:
    server: RunningServer
    receiver: HttpReceiver
    clock: ShiftableClock

    async def step(self) -> int:
        return (await self.server.app.dispatcher.run_once()).claimed

    async def results(self, notification_id: str, count: int) -> list[t.Event]:
        events = await events_until(
            self.server.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, notification_ids=[notification_id]),
            lambda evs: sum(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in evs) >= count,
        )
        return [e for e in events if e.kind == t.EVENT_KIND_DELIVERY_RESULT]


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(_hook("hook", receiver))
        for name, attempts in (("ops.once", 1), ("ops.twice", 2)):
            await activate_policy(
                db_url,
                name,
                channels=["hook"],
                delivery_mode=DeliveryMode.GUARANTEED,
                require_ack=False,
                max_attempts=attempts,
            )
        clock = ShiftableClock()
        server = await start_server(
            db_url,
            tmp_path,
            clock=clock,
            channels_file=str(channels),
            dispatch_enabled=False,
            dispatch_max_throttle_deferrals=2,
        )
        try:
            yield Rig(server, receiver, clock)
        finally:
            await server.stop()


THROTTLE = Reply(status=429, headers={"retry-after": "600"})


async def test_a_429_defers_without_spending_an_attempt(rig: Rig) -> None:
    """max_attempts 1: a 429 counted as a failure would dead-letter at once. Deferred
    instead, twice, each retried only once its Retry-After has passed; then delivered
    by the one attempt the policy allows."""
    rig.receiver.script(THROTTLE, THROTTLE, Reply(status=200))
    nid = await _send(rig.server, "ops.once", "throttled")
    for deferral in (1, 2):
        assert await rig.step() == 1
        row = await _get(rig.server, nid)
        assert row.state == t.NOTIFICATION_STATE_PENDING
        # The attempt given back: not counted against max_attempts (``attempts``
        # counts claims, each numbered once in the event timeline).
        assert (row.attempts, row.cycle_attempts) == (deferral, 0)
        waited = row.next_attempt_time.ToDatetime() - row.update_time.ToDatetime()
        assert waited.total_seconds() >= 600  # Retry-After honoured
        assert await rig.step() == 0  # not due before it
        assert len(rig.receiver.requests) == deferral
        rig.clock.advance(seconds=601)
    assert await rig.step() == 1
    done = await _get(rig.server, nid)
    assert done.state == t.NOTIFICATION_STATE_DELIVERED
    assert (done.attempts, done.cycle_attempts) == (3, 1)
    assert len(rig.receiver.requests) == 3
    assert len({r.headers["webhook-id"] for r in rig.receiver.requests}) == 1
    results = await rig.results(nid, 3)
    assert [r.payload["status"] for r in results] == ["PENDING", "PENDING", "DELIVERED"]
    assert [r.payload["outcome"]["throttle_deferrals"] for r in results] == [1, 2, 2]
    assert list(results[0].payload["outcome"]["channels_deferred"]) == ["hook"]


async def test_past_its_deferrals_a_429_spends_attempts_and_ends_as_the_policy_says(
    rig: Rig,
) -> None:
    """A provider that only ever answers 429: two deferrals (the setting), then each
    429 spends an attempt; the second and last (max_attempts 2) dead-letters it."""
    rig.receiver.default = THROTTLE
    nid = await _send(rig.server, "ops.twice", "always-throttled")
    counters = []
    for _ in range(4):
        assert await rig.step() == 1
        row = await _get(rig.server, nid)
        counters.append((row.state, row.cycle_attempts))
        rig.clock.advance(hours=2)
    pending, failed = t.NOTIFICATION_STATE_PENDING, t.NOTIFICATION_STATE_FAILED
    assert counters == [(pending, 0), (pending, 0), (pending, 1), (failed, 2)]
    assert (await _get(rig.server, nid)).dead_letter
    assert await rig.step() == 0  # over: nothing more is sent
    assert len(rig.receiver.requests) == 4
    results = await rig.results(nid, 4)
    assert [r.payload["outcome"]["throttle_deferrals"] for r in results] == [1, 2, 2, 2]


async def test_run_once_alone_still_delivers_every_channel(rig: Rig) -> None:
    """The bulkheads are given back when a delivery ends: stepping many deliveries one
    batch at a time never leaves a channel full."""
    nids = [await _send(rig.server, "ops.once", f"n-{i}") for i in range(3)]
    while await rig.step():
        pass
    assert rig.server.app.dispatcher.bulkheads.busy("hook") == 0
    assert {(await _get(rig.server, n)).state for n in nids} == {t.NOTIFICATION_STATE_DELIVERED}


async def test_a_channel_admitted_over_its_bulkhead_is_not_called_and_spends_nothing(
    rig: Rig,
) -> None:
    """A delivery admitted while its channel's bulkhead filled (as a batch or a
    hand-over racing another can be) does not call the channel: the channel answers
    busy, the attempt is settled PENDING, fenced by its lease, and given back. While
    the channel stays full the claim passes over the work; once it has room, the
    work is delivered by its first counted attempt."""
    dispatcher = rig.server.app.dispatcher
    bulkheads = dispatcher.bulkheads
    nid = await _send(rig.server, "ops.once", "busy")
    [claim] = await dispatcher.claim(1)
    for _ in range(bulkheads.limit):  # every place taken, as by calls in flight
        assert bulkheads.enter("hook")
    await dispatcher.deliver(claim)
    assert not rig.receiver.requests
    row = await _get(rig.server, nid)
    assert (row.state, row.cycle_attempts) == (t.NOTIFICATION_STATE_PENDING, 0)
    [result] = await rig.results(nid, 1)
    assert list(result.payload["outcome"]["channels_deferred"]) == ["hook"]
    assert not list(result.payload["outcome"]["channels_attempted"])
    rig.clock.advance(hours=1)
    assert await rig.step() == 0  # due, but its channel is full: passed over
    for _ in range(bulkheads.limit):
        bulkheads.leave("hook")
    assert await rig.step() == 1
    done = await _get(rig.server, nid)
    assert (done.state, done.cycle_attempts) == (t.NOTIFICATION_STATE_DELIVERED, 1)
    assert len(rig.receiver.requests) == 1
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: sum(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in evs) >= 2,
    )
    busy = next(e for e in events if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT)
    assert busy.payload["metadata"]["bulkhead_full"] is True
    assert busy.payload["success"] is False and busy.payload["lease_token"] == claim.token
