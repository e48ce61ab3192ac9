"""A replica never fails work it cannot do: during a rollout that adds a channel, a
replica whose channels file lacks it leaves that channel's notifications alone (no
claim, no attempt consumed) while it keeps delivering the rest, and a replica that
has the channel delivers them once. Replicas publish a fingerprint of their channel
configuration (metric and log line), so the mismatch is visible."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PostgresDatabases
from tests.support.http_receiver import HttpReceiver
from tests.support.policies import activate_policy
from tests.support.postgres import free_port
from tests.support.process import ServerProcess
from tests.support.server import KEYS, send_request, write_key_file
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

NEW_CHANNEL_NOTIFICATIONS = 5


@pytest.fixture
async def receiver() -> AsyncIterator[HttpReceiver]:
    async with HttpReceiver() as rx:
        yield rx


def auth(who: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {KEYS[who]}"),)


async def channel_config_metric(metrics_port: int) -> dict[str, str]:
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
    [labels] = [
        dict(s.labels)
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
        if s.name == "uns_channel_config_info" and s.value == 1
    ]
    return labels


def logged_fingerprint(server: ServerProcess) -> str:
    for line in server.output().splitlines():
        if line.startswith("{") and '"channels configured"' in line:
            return str(json.loads(line)["channel_fingerprint"])
    raise AssertionError(f"no 'channels configured' line:\n{server.output()}")


async def results_until(
    stub: pb_grpc.NotificationServiceStub, wanted: set[str]
) -> dict[str, list[t.Event]]:
    """Every attempt and result event so far, until ``wanted`` all have a result."""
    by_id: dict[str, list[t.Event]] = {}
    call = stub.WatchEvents(
        pb.WatchEventsRequest(
            replay_history=True,
            kinds=[t.EVENT_KIND_ATTEMPT_STARTED, t.EVENT_KIND_DELIVERY_RESULT],
        ),
        metadata=auth("oscar"),
        timeout=60,
    )
    async for response in call:
        if response.HasField("event"):
            by_id.setdefault(response.event.notification_id, []).append(response.event)
            done = {
                nid
                for nid, evs in by_id.items()
                if any(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in evs)
            }
            if wanted <= done:
                break
    call.cancel()
    return by_id


async def test_a_replica_without_a_channel_leaves_its_work_to_one_with_it(
    postgres: PostgresDatabases, tmp_path: Path, receiver: HttpReceiver
) -> None:
    url = await postgres.new()
    guaranteed = {"delivery_mode": DeliveryMode.GUARANTEED, "require_ack": False}
    await activate_policy(url, "ops.new", channels=["hook"], **guaranteed)
    await activate_policy(url, "ops.old", channels=["log"], **guaranteed)
    old_channels = tmp_path / "old.yaml"
    old_channels.write_text("log:\n  type: log\n")
    new_channels = tmp_path / "new.yaml"
    new_channels.write_text(
        f"log:\n  type: log\nhook:\n  type: webhook\n  url: {receiver.url('/h')}\n  secret: s\n"
    )
    keys = write_key_file(tmp_path)

    def replica(channels: Path, *args: str) -> ServerProcess:
        return ServerProcess(
            tmp_path,
            "--database-url",
            url,
            "--api-keys-file",
            str(keys),
            "--channels-file",
            str(channels),
            "--idle-poll-seconds",
            "0.1",
            *args,
        )

    old_metrics, new_metrics = free_port(), free_port()
    old = replica(old_channels, "--metrics-listen", f"127.0.0.1:{old_metrics}")
    # Accepts but does not dispatch: every delivery below goes through a claim.
    api = replica(new_channels, "--no-dispatch-enabled")
    new: ServerProcess | None = None
    try:
        for server in (old, api):
            await asyncio.to_thread(server.wait_serving)
        async with grpc.aio.insecure_channel(api.target) as channel:
            stub = pb_grpc.NotificationServiceStub(channel)

            async def send(notification_type: str, key: str) -> str:
                reply = await stub.SendNotification(
                    send_request(notification_type=notification_type, idempotency_key=key),
                    metadata=auth("alice"),
                    timeout=10,
                )
                return str(reply.notification_id)

            waiting = {await send("ops.new", f"n{i}") for i in range(NEW_CHANNEL_NOTIFICATIONS)}
            # Due after the others, same priority: the claim that takes it has passed
            # over them (and would have failed them, had it taken them).
            later = await send("ops.old", "o1")
            seen = await results_until(stub, {later})
            assert seen[later][-1].payload["status"] == "DELIVERED"
            assert not waiting & set(seen)  # not even an attempt started
            for nid in waiting:
                got = await stub.GetNotification(
                    pb.GetNotificationRequest(notification_id=nid), metadata=auth("oscar")
                )
                n = got.notification
                assert (n.state, n.attempts, n.dead_letter) == (
                    t.NOTIFICATION_STATE_PENDING,
                    0,
                    False,
                )

            # The replica with the channel starts (the rollout goes on): it delivers
            # them, once each, on the first attempt.
            new = replica(new_channels, "--metrics-listen", f"127.0.0.1:{new_metrics}")
            await asyncio.to_thread(new.wait_serving)
            seen = await results_until(stub, waiting)
            for nid in waiting:
                kinds = [e.kind for e in seen[nid]]
                assert kinds == [t.EVENT_KIND_ATTEMPT_STARTED, t.EVENT_KIND_DELIVERY_RESULT]
                assert seen[nid][-1].payload["status"] == "DELIVERED"
            calls = Counter(r.headers["webhook-id"] for r in receiver.requests)
            assert calls == Counter({f"{nid}:hook:1": 1 for nid in waiting})

            # The two configurations are told apart, by metric and by log line.
            old_info = await channel_config_metric(old_metrics)
            new_info = await channel_config_metric(new_metrics)
            assert old_info["channels"] == "log"
            assert new_info["channels"] == "hook,log"
            assert old_info["fingerprint"] != new_info["fingerprint"]
            assert logged_fingerprint(old) == old_info["fingerprint"]
            assert logged_fingerprint(new) == new_info["fingerprint"]
            assert logged_fingerprint(api) == new_info["fingerprint"]
    finally:
        for server in (old, api, new):
            if server is not None:
                await asyncio.to_thread(server.stop)
