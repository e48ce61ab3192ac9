"""Simulate runs Send's decision without writing anything or calling a provider."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.http_receiver import HttpReceiver
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode, Priority
from uns_server.store.db import Database
from uns_server.store.events import SqlEventReads
from uns_server.store.tables import notifications


async def snapshot(url: str) -> tuple[int, int]:
    """(notification rows, event high-water sequence)."""
    db = Database(url)
    try:
        async with db.read() as conn:
            rows = len((await conn.execute(notifications.select())).all())
            return rows, await SqlEventReads(conn).high_water()
    finally:
        await db.dispose()


async def simulate(srv: RunningServer, **fields: object) -> pb.SimulateResponse:
    reply: pb.SimulateResponse = await srv.stub("alice").Simulate(
        pb.SimulateRequest(request=send_request(**fields))
    )
    return reply


async def test_simulate_reports_every_outcome_and_writes_nothing(
    db_url: str, tmp_path: Path
) -> None:
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(f"hook:\n  type: webhook\n  url: {receiver.url()}\n  secret: s\n")
        await activate_policy(
            db_url,
            "ops.paged",
            channels=["hook"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=True,
            ack_timeout_minutes=15,
            priority=Priority.HIGH,
            max_attempts=7,
        )
        srv = await start_server(
            db_url, tmp_path, channels_file=str(channels), dispatch_enabled=False
        )
        try:
            fresh = await simulate(srv, notification_type="ops.paged", idempotency_key="k")
            assert fresh.outcome == pb.SIMULATE_OUTCOME_NEW
            policy = fresh.effective_policy
            assert list(fresh.resolved_channels) == ["hook"] and fresh.require_ack
            assert (policy.ack_timeout_minutes, policy.max_attempts) == (15, 7)
            assert policy.priority == t.PRIORITY_HIGH and policy.policy_revision == 1

            leader = await srv.stub("alice").SendNotification(
                send_request(notification_type="ops.paged", idempotency_key="k", dedup_key="d")
            )
            before = await snapshot(db_url)
            replay = await simulate(
                srv, notification_type="ops.paged", idempotency_key="k", dedup_key="d"
            )
            assert replay.outcome == pb.SIMULATE_OUTCOME_IDEMPOTENT_REPLAY
            assert replay.existing_notification_id == leader.notification_id
            conflict = await simulate(
                srv, notification_type="ops.paged", idempotency_key="k", title="changed"
            )
            assert conflict.outcome == pb.SIMULATE_OUTCOME_IDEMPOTENCY_CONFLICT
            follow = await simulate(
                srv, notification_type="ops.paged", idempotency_key="k2", dedup_key="d"
            )
            assert follow.outcome == pb.SIMULATE_OUTCOME_COALESCED
            assert follow.dedup_owner_id == leader.notification_id
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await simulate(srv, notification_type="ops.paged", delivery_mode=1)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert await snapshot(db_url) == before

            await srv.app.dispatcher.run_once()  # the leader is delivered
            dedup = await simulate(
                srv, notification_type="ops.paged", idempotency_key="k3", dedup_key="d"
            )
            assert dedup.outcome == pb.SIMULATE_OUTCOME_DEDUPLICATED
        finally:
            await srv.stop()
        assert len(receiver.requests) == 1  # only the real send reached the provider


async def test_simulate_refusals_name_fields_by_their_path_in_simulate_request(
    db_url: str, tmp_path: Path
) -> None:
    """A BadRequest field path leads to a field of the request the caller sent
    (AIP-193): in a SimulateRequest the checked message is ``request``."""
    await activate_policy(
        db_url,
        "ops.quiet",
        channels=["log"],
        delivery_mode=DeliveryMode.BEST_EFFORT,
        require_ack=False,
    )
    srv = await start_server(db_url, tmp_path, dispatch_enabled=False)
    stub = srv.stub("alice")
    try:
        cases = [
            (pb.SimulateRequest(), "INVALID_REQUEST", "request.title"),
            (
                pb.SimulateRequest(request=send_request(title="x" * 300)),
                "INVALID_REQUEST",
                "request.title",
            ),
            (
                pb.SimulateRequest(
                    request=send_request(notification_type="ops.quiet", require_ack=True)
                ),
                "POLICY_OVERRIDE",
                "request.require_ack",
            ),
            (
                pb.SimulateRequest(request=send_request(metadata={"email_to": "ceo@example.com"})),
                "RESERVED_METADATA_KEY",
                "request.metadata.email_to",
            ),
        ]
        for request, reason, path in cases:
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await stub.Simulate(request)
            error = rich_error(exc.value)
            assert error.reason == reason, error
            assert path in error.violations, error.violations
            assert all(f.startswith("request.") for f in error.violations), error.violations
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.Simulate(pb.SimulateRequest(request=send_request(title="x" * 300)))
        error = rich_error(exc.value)
        assert error.metadata["fields"] == "request.title"
        # SendNotification itself still names its own fields.
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SendNotification(send_request(title="x" * 300))
        assert "title" in rich_error(exc.value).violations
    finally:
        await srv.stop()
