"""WatchEvents after retention pruned history: a resume cursor (or a history replay)
below the pruned horizon is refused with OUT_OF_RANGE / HISTORY_COMPACTED and the
sequence to resync from — never a silent gap (etcd's compact_revision). Through gRPC,
on both dialects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.server import Client, RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.retention import RetentionPolicy
from uns_server.services.retention import Report, RetentionService


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


@pytest.fixture
async def manual(
    db_url: str, tmp_path: Path, clock: ShiftableClock
) -> AsyncIterator[RunningServer]:
    running = await start_server(db_url, tmp_path, clock=clock, dispatch_enabled=False)
    try:
        yield running
    finally:
        await running.stop()


async def send(srv: RunningServer, key: str) -> str:
    reply = await srv.stub("alice").SendNotification(send_request(idempotency_key=key))
    return str(reply.notification_id)


async def compact(srv: RunningServer, clock: ShiftableClock) -> Report:
    retention = RetentionService(srv.app.store, RetentionPolicy())
    return await retention.run_once(True, clock() + timedelta(days=40))


async def refused(client: Client, request: pb.WatchEventsRequest) -> dict[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in client.WatchEvents(request):
            pass
    err = rich_error(caught.value)
    assert err.code == grpc.StatusCode.OUT_OF_RANGE, err
    assert (err.reason, err.domain) == ("HISTORY_COMPACTED", "uns.v1")
    return err.metadata


async def test_resume_below_the_horizon_is_refused_with_the_resync_point(
    manual: RunningServer, clock: ShiftableClock
) -> None:
    old = await send(manual, "old")
    assert (await manual.app.dispatcher.run_once()).claimed == 1
    pending = await send(manual, "pending")
    oscar, alice = manual.stub("oscar"), manual.stub("alice")
    before = await events_until(
        oscar,
        pb.WatchEventsRequest(replay_history=True),
        has_kind(pending, t.EVENT_KIND_ACCEPTED),
    )
    old_sequences = [e.sequence for e in before if e.notification_id == old]

    report = await compact(manual, clock)
    assert report.notification_ids == (old,)
    horizon = report.compacted_sequence
    assert horizon == max(old_sequences)

    for request in (
        pb.WatchEventsRequest(after_sequence=1),
        pb.WatchEventsRequest(after_sequence=horizon - 1),
        pb.WatchEventsRequest(after_sequence=horizon - 1, notification_ids=[pending]),
    ):
        metadata = await refused(oscar, request)
        assert metadata["resync_from_sequence"] == str(horizon)
        assert metadata["after_sequence"] == str(request.after_sequence)
    assert (await refused(alice, pb.WatchEventsRequest(after_sequence=1)))[
        "resync_from_sequence"
    ] == str(horizon)

    # Resuming at the horizon loses nothing that was kept: the pending notification's
    # events (committed after the pruned ones), then the receipt.
    after = await events_until(
        oscar,
        pb.WatchEventsRequest(after_sequence=horizon),
        lambda evs: any(e.kind == t.EVENT_KIND_RETENTION_APPLIED for e in evs),
    )
    assert [e.sequence for e in after] == sorted(e.sequence for e in after)
    assert all(e.sequence > horizon for e in after)
    assert {e.notification_id for e in after} == {pending, report.receipt_id}
    receipt = after[-1]
    assert receipt.notification_id == report.receipt_id
    assert receipt.payload["notification_ids"] == [old]
    assert receipt.payload["compacted_sequence"] == horizon

    # "All retained history" starts at the horizon rather than failing.
    retained = await events_until(
        oscar,
        pb.WatchEventsRequest(replay_history=True),
        lambda evs: any(e.kind == t.EVENT_KIND_RETENTION_APPLIED for e in evs),
    )
    assert [e.id for e in retained] == [e.id for e in after]

    # A producer resumes at the horizon too; the receipt is not its to see.
    mine = await events_until(
        alice,
        pb.WatchEventsRequest(after_sequence=horizon),
        has_kind(pending, t.EVENT_KIND_ACCEPTED),
    )
    assert {e.notification_id for e in mine} == {pending}


async def test_no_compaction_no_refusal(manual: RunningServer, clock: ShiftableClock) -> None:
    nid = await send(manual, "only")
    report = await RetentionService(manual.app.store, RetentionPolicy()).run_once(True, clock())
    assert report.compacted_sequence == 0 and report.notification_ids == ()
    seen = await events_until(
        manual.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True),
        lambda evs: any(e.kind == t.EVENT_KIND_RETENTION_APPLIED for e in evs),
    )
    assert seen[0].notification_id == nid and seen[0].sequence == 1
