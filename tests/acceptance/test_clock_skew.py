"""Leases on the database's clock: two ``uns-server`` processes on one PostgreSQL,
their wall clocks 20 minutes apart (one 10 minutes behind, one 10 minutes ahead),
deliver every notification with one attempt and one provider call, and both accept
acknowledgements within a 5-minute deadline. Judged on their own clocks, the one
ahead would take over every lease the other holds (and time acks out early), and the
one behind would write leases and deadlines already past for the other."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tests.conftest import PostgresDatabases
from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.process import ServerProcess
from tests.support.server import KEYS, send_request
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.store.clock import TEST_SKEW_ENV

KEYS_FILE = [
    # Its own principal's notifications: a responder of any tenant rule may ack them.
    {"key": "uns_test_skew_alice", "principal": "alice", "roles": ["producer", "responder"]},
    {"key": KEYS["oscar"], "principal": "oscar", "roles": ["operator"]},
]

SKEW_SECONDS = 600  # ten minutes, against a 60 s lease
PER_REPLICA = 10
ACK_TIMEOUT_MINUTES = 5  # less than the skew: judged on either clock, already past
# Each provider call takes this long, so leases are held while the other replica polls.
PROVIDER_DELAY_SECONDS = 1.0


@pytest.fixture
async def receiver() -> AsyncIterator[HttpReceiver]:
    async with HttpReceiver() as rx:
        rx.default = Reply(delay_seconds=PROVIDER_DELAY_SECONDS)
        yield rx


def auth(who: str) -> tuple[tuple[str, str]]:
    key = KEYS["oscar"] if who == "oscar" else "uns_test_skew_alice"
    return (("authorization", f"Bearer {key}"),)


async def test_skewed_replicas_never_take_over_a_live_lease(
    postgres: PostgresDatabases, tmp_path: Path, receiver: HttpReceiver
) -> None:
    url = await postgres.new()
    await activate_policy(
        url,
        "ops.skew",
        channels=["hook"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        ack_timeout_minutes=ACK_TIMEOUT_MINUTES,
    )
    channels = tmp_path / "channels.yaml"
    channels.write_text(f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n  secret: s\n")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS_FILE))
    servers = [
        ServerProcess(
            tmp_path,
            "--database-url",
            url,
            "--api-keys-file",
            str(keys),
            "--channels-file",
            str(channels),
            "--idle-poll-seconds",
            "0.1",  # the ahead replica looks for "expired" leases all the time
            "--log-level",
            "WARNING",
            env={TEST_SKEW_ENV: str(skew)},
        )
        for skew in (-SKEW_SECONDS, SKEW_SECONDS)
    ]
    try:
        for server in servers:
            await asyncio.to_thread(server.wait_serving)
        channels_ = [grpc.aio.insecure_channel(s.target) for s in servers]
        try:
            stubs = [pb_grpc.NotificationServiceStub(c) for c in channels_]
            ids = [
                (
                    await stubs[i % 2].SendNotification(
                        send_request(notification_type="ops.skew", idempotency_key=f"k{i}"),
                        metadata=auth("alice"),
                        timeout=10,
                    )
                ).notification_id
                for i in range(2 * PER_REPLICA)
            ]
            kinds = Counter[int]()
            call = stubs[0].WatchEvents(
                pb.WatchEventsRequest(
                    replay_history=True,
                    kinds=[
                        t.EVENT_KIND_ATTEMPT_STARTED,
                        t.EVENT_KIND_LEASE_LOST,
                        t.EVENT_KIND_DELIVERY_RESULT,
                    ],
                ),
                metadata=auth("oscar"),
                timeout=60,
            )
            results: list[t.Event] = []
            async for response in call:
                if response.HasField("event"):
                    kinds[response.event.kind] += 1
                    if response.event.kind == t.EVENT_KIND_DELIVERY_RESULT:
                        results.append(response.event)
                        if len(results) == len(ids):
                            break
            call.cancel()
            # Every deadline is judged on the database's clock, on both replicas.
            for i, nid in enumerate(ids):
                acked = await stubs[i % 2].Acknowledge(
                    pb.AcknowledgeRequest(notification_id=nid), metadata=auth("alice"), timeout=10
                )
                assert acked.notification.ack_state == t.ACK_STATE_ACKED
        finally:
            for c in channels_:
                await c.close()
    finally:
        codes = [await asyncio.to_thread(s.stop) for s in servers]
    # Every result settles after its provider call answered: all calls are in.
    assert codes == [0, 0], [s.output() for s in servers]
    assert kinds[t.EVENT_KIND_LEASE_LOST] == 0
    assert kinds[t.EVENT_KIND_ATTEMPT_STARTED] == len(ids)  # no lease taken over
    assert sorted(e.notification_id for e in results) == sorted(ids)
    assert all(e.payload["status"] == "DELIVERED" and e.payload["attempt"] == 1 for e in results)
    # The deliveries (each acknowledged obligation also sends its settled notice).
    deliveries = [r for r in receiver.requests if r.json()["type"] == "uns.notification"]
    calls = Counter(r.headers["webhook-id"] for r in deliveries)
    assert calls == Counter({f"{nid}:hook:1": 1 for nid in ids})  # none repeated
