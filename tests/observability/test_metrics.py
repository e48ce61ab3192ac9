"""Metrics over the real Prometheus endpoint, after real traffic through the gRPC API.

Dispatch is stepped with ``run_once()`` and a movable clock; a loopback webhook
answers 200 on ``/ok`` and 500 on ``/bad``. Every counter is read as a delta from a
scrape taken before the traffic, so the assertions say exactly what each outcome
added.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml

from tests.deploy import dashboard
from tests.observability.helpers import Scrape, scrape
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.logs import JsonFormatter, TextFormatter
from uns_server.settings import Settings, SettingsError

LEASE_SECONDS = 5.0
SECRET = "whsec_cGxhbnRlZC1zZWNyZXQtdmFsdWUtMTIzNDU="


@dataclass
class Rig:
    server: RunningServer
    receiver: HttpReceiver
    clock: ShiftableClock

    async def send(
        self, notification_type: str, key: str, **fields: str
    ) -> pb.SendNotificationResponse:
        sent: pb.SendNotificationResponse = await self.server.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=key, **fields)
        )
        return sent

    async def dispatch(self) -> int:
        return (await self.server.app.dispatcher.run_once()).claimed


def _reply(request: RecordedRequest) -> Reply:
    return Reply(status=500) if request.path == "/bad" else Reply(status=200)


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as receiver:
        receiver.responder = _reply
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            "".join(
                f"{name}:\n  type: webhook\n  url: {receiver.url('/' + name)}\n"
                f"  secret: {SECRET}\n  timeout_seconds: 2\n"
                for name in ("ok", "bad")
            )
        )
        for name, channel, mode, attempts, ack in (
            ("ops.ok", "ok", DeliveryMode.GUARANTEED, 3, False),
            ("ops.dlq", "bad", DeliveryMode.GUARANTEED, 2, False),
            ("ops.be", "bad", DeliveryMode.BEST_EFFORT, 1, False),
            ("ops.ack", "ok", DeliveryMode.GUARANTEED, 3, True),
        ):
            await activate_policy(
                db_url,
                name,
                channels=[channel],
                delivery_mode=mode,
                require_ack=ack,
                max_attempts=attempts,
            )
        clock = ShiftableClock()
        server = await start_server(
            db_url,
            tmp_path,
            clock=clock,
            channels_file=str(channels),
            dispatch_enabled=False,
            lease_seconds=LEASE_SECONDS,
            metrics_listen="127.0.0.1:0",
        )
        try:
            yield Rig(server, receiver, clock)
        finally:
            await server.stop()


def delta(after: Scrape, before: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


async def test_counters_move_by_the_outcomes_of_real_traffic(rig: Rig) -> None:
    app = rig.server.app
    before = await scrape(rig.server)

    # Intake: six new leaders, one follower, one idempotent replay.
    ok1 = await rig.send("ops.ok", "ok1")
    await rig.send("ops.ok", "ok2", dedup_key="d")
    follower = await rig.send("ops.ok", "ok3", dedup_key="d")
    assert follower.dedup_owner_id
    replay = await rig.send("ops.ok", "ok1")
    assert replay.idempotent_replay and replay.notification_id == ok1.notification_id
    await rig.send("ops.dlq", "dlq")
    await rig.send("ops.be", "be")
    ack1 = await rig.send("ops.ack", "ack1")
    await rig.send("ops.ack", "ack2")

    # The queue gauges come from the sampler's one query, not from each scrape.
    assert app.queue_sampler is not None
    await app.queue_sampler.run_once()
    queued = await scrape(rig.server)
    assert queued.value("uns_queue_depth", state="due") == 6  # the follower waits
    assert queued.value("uns_queue_depth", state="leased") == 0
    assert queued.value("uns_queue_oldest_due_age_seconds") >= 0

    # One batch: four delivered (the follower deduplicated with its leader), the
    # dead-letter candidate retries, best-effort fails at once.
    assert await rig.dispatch() == 6
    dedup = await rig.send("ops.ok", "ok4", dedup_key="d")  # leader delivered: at once
    assert dedup.state == t.NOTIFICATION_STATE_DEDUPLICATED
    await rig.server.stub("rita").Acknowledge(
        pb.AcknowledgeRequest(notification_id=ack1.notification_id)
    )

    # Later: the retry exhausts (dead letter); the other ack times out.
    rig.clock.advance(hours=2)
    assert await rig.dispatch() == 1
    assert (await app.timers.run_once()).timed_out == 1

    # A stalled worker loses its lease to another one.
    ok5 = await rig.send("ops.ok", "ok5")
    [stale] = await app.dispatcher.claim(1)
    rig.clock.advance(seconds=LEASE_SECONDS + 1)
    [fresh] = await app.dispatcher.claim(1)
    assert stale.notification.id == fresh.notification.id == ok5.notification_id
    await app.dispatcher.deliver(fresh)
    await app.dispatcher.deliver(stale)

    after = await scrape(rig.server)

    def d(name: str, **labels: str) -> float:
        return delta(after, before, name, **labels)

    assert d("uns_notifications_accepted_total", outcome="new") == 7
    assert d("uns_notifications_accepted_total", outcome="coalesced") == 1
    assert d("uns_notifications_accepted_total", outcome="deduplicated") == 1
    assert d("uns_notifications_idempotent_replays_total") == 1
    assert d("uns_notifications_deduplicated_total", stage="intake") == 1
    assert d("uns_notifications_deduplicated_total", stage="dispatch") == 1
    assert d("uns_notifications_delivered_total") == 5  # ok1, ok2, ack1, ack2, ok5
    assert d("uns_notifications_failed_total") == 2
    assert d("uns_notifications_failed_total", delivery_mode="BEST_EFFORT") == 1
    assert d("uns_notifications_dead_lettered_total") == 1
    assert d("uns_dispatch_retries_total") == 1
    assert d("uns_dispatch_lease_lost_total") == 1
    assert d("uns_acks_total", state="ACKED") == 1
    assert d("uns_ack_timeouts_total") == 1

    # Ten sends one after another (the replay included): ten intake transactions of
    # one call each.
    assert d("uns_intake_group_size_count") == 10
    assert d("uns_intake_group_size_sum") == 10

    # Latency: accept -> final settlement once per finished cycle; every attempt.
    assert d("uns_dispatch_latency_seconds_count", status="DELIVERED") == 5
    assert d("uns_dispatch_latency_seconds_count", status="FAILED") == 2
    # The dead letter waited through the two hours of backoff.
    assert after.value("uns_dispatch_latency_seconds_sum", status="FAILED") >= 7200
    attempts = "uns_dispatch_attempt_duration_seconds_count"
    assert d(attempts) == 9
    assert d(attempts, outcome="delivered") == 5
    assert d(attempts, outcome="retry") == 1
    assert d(attempts, outcome="failed") == 2
    assert d(attempts, outcome="lease_lost") == 1
    sends = "uns_channel_send_duration_seconds_count"
    assert d(sends, channel="ok", result="success") == 6  # ok5 twice (stale + fresh)
    assert d(sends, channel="bad", result="transient") == 3
    assert len([r for r in rig.receiver.requests if r.path == "/ok"]) == 6

    # The queue is empty again once sampled.
    await app.queue_sampler.run_once()
    drained = await scrape(rig.server)
    assert drained.value("uns_queue_depth", state="due") == 0
    assert drained.value("uns_queue_oldest_due_age_seconds") == 0

    # Every metric the Grafana dashboard (deploy/grafana) queries is one this server
    # exports, and so is every one the alert rules use (but the stuck-work gauge's
    # and Prometheus's own `up`, checked by name in tests/deploy).
    exported = {name for name, _, _ in drained.samples}
    queried = {name for expr in dashboard.exprs() for name in dashboard.metric_names(expr)}
    assert queried - exported == set()
    rules = yaml.safe_load(dashboard.RULES.read_text())["groups"][0]["rules"]
    alerted = {name for r in rules for name in dashboard.metric_names(r["expr"])}
    assert alerted - exported <= {"uns_undeliverable_due_notifications"}


async def test_watch_streams_are_counted_while_open(rig: Rig) -> None:
    assert (await scrape(rig.server)).value("uns_watch_streams") == 0
    call = rig.server.stub("oscar").WatchEvents(pb.WatchEventsRequest(), timeout=None)
    try:
        first = await asyncio.wait_for(call.read(), 10)
        assert first.HasField("heartbeat")  # subscribed and positioned
        open_ = await scrape(rig.server)
        assert open_.value("uns_watch_streams") == 1
        assert open_.value("uns_watch_lag", stat="max") == 0
        assert open_.has("uns_watch_overflows_total")
    finally:
        call.cancel()
    for _ in range(100):  # the server sees the cancellation asynchronously
        if rig.server.app.hub.subscribers == 0:
            break
        await asyncio.sleep(0.05)
    assert (await scrape(rig.server)).value("uns_watch_streams") == 0


async def test_rpcs_are_counted_by_method_and_code_with_process_metrics(rig: Rig) -> None:
    before = await scrape(rig.server)
    await rig.send("ops.ok", "rpc1")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await rig.server.stub("alice").GetNotification(
            pb.GetNotificationRequest(notification_id="00000000-0000-4000-8000-000000000000")
        )
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    after = await scrape(rig.server)
    count = "uns_rpc_server_duration_seconds_count"
    send = "/uns.v1.NotificationService/SendNotification"
    get = "/uns.v1.NotificationService/GetNotification"
    assert delta(after, before, count, method=send, code="OK") == 1
    assert delta(after, before, count, method=get, code="NOT_FOUND") == 1
    assert delta(after, before, count, method=get, code="OK") == 0
    assert after.has("uns_rpc_server_duration_seconds_bucket")
    assert after.value("process_resident_memory_bytes") > 0
    assert after.has("python_info")


async def test_a_failed_attempt_logs_its_notification_channel_and_error(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="uns.dispatch")
    sent = await rig.send("ops.be", "be-log")
    assert await rig.dispatch() == 1
    [line] = [r for r in caplog.records if r.getMessage() == "delivery attempt settled"]
    assert line.levelno == logging.WARNING
    fields = json.loads(JsonFormatter().format(line))
    assert fields["notification_id"] == sent.notification_id
    assert fields["outcome"] == "failed" and fields["channel"] == "bad"
    assert fields["error_class"] == "transient" and "500" in fields["error"]
    text = TextFormatter().format(line)
    assert f"notification_id={sent.notification_id} " in text and "channel=bad" in text


def test_metrics_listen_must_be_host_and_port() -> None:
    with pytest.raises(SettingsError, match="metrics_listen"):
        Settings.from_env({"UNS_METRICS_LISTEN": "9464"})
    settings = Settings.from_env({"UNS_METRICS_LISTEN": "127.0.0.1:9464"})
    assert settings.metrics_listen == "127.0.0.1:9464"
    assert Settings().metrics_listen == ""  # off by default: no port opened
    assert Settings().otlp_endpoint is None  # no exporter, no network by default
