"""Acknowledge, Replay, ResolveFailure, dedup settlement and WatchEvents, end to end
through the gRPC API on both dialects."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.policies import activate_policy
from tests.support.ports import closed_port
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, has_kind, kinds
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


async def broken_channel_server(
    db_url: str, tmp_path: Path, clock: ShiftableClock, **overrides: object
) -> RunningServer:
    """A server with a `broken` webhook channel (nothing listens) besides `log`."""
    channels = tmp_path / "channels.yaml"
    channels.write_text(
        f"broken:\n  type: webhook\n  url: http://127.0.0.1:{closed_port()}/hook\n"
        "  secret: test-secret\n  timeout_seconds: 2\n"
    )
    return await start_server(
        db_url, tmp_path, clock=clock, channels_file=str(channels), **overrides
    )


@pytest.fixture
async def srv(db_url: str, tmp_path: Path, clock: ShiftableClock) -> AsyncIterator[RunningServer]:
    running = await broken_channel_server(db_url, tmp_path, clock)
    try:
        yield running
    finally:
        await running.stop()


async def get(srv: RunningServer, notification_id: str) -> t.Notification:
    reply = await srv.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=notification_id)
    )
    return reply.notification


async def test_watch_streams_every_event_and_resumes_without_gaps(srv: RunningServer) -> None:
    alice = srv.stub("alice")
    first = await alice.SendNotification(send_request(idempotency_key="w1"))
    seen = await events_until(
        alice,
        pb.WatchEventsRequest(replay_history=True),
        has_kind(first.notification_id, t.EVENT_KIND_DELIVERY_RESULT),
    )
    assert kinds(seen) == [
        "ACCEPTED",
        "ATTEMPT_STARTED",
        "CHANNEL_ATTEMPT_STARTED",
        "CHANNEL_ATTEMPT_RESULT",
        "DELIVERY_RESULT",
    ]
    sequences = [e.sequence for e in seen]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)

    # Resume from the middle: exactly the rest, then the live tail of a new send.
    resume_from = seen[1].sequence
    second = await alice.SendNotification(send_request(idempotency_key="w2"))
    resumed = await events_until(
        alice,
        pb.WatchEventsRequest(after_sequence=resume_from),
        has_kind(second.notification_id, t.EVENT_KIND_DELIVERY_RESULT),
    )
    assert [e.id for e in resumed[:3]] == [e.id for e in seen[2:]]
    assert all(a.sequence < b.sequence for a, b in itertools.pairwise(resumed))


async def test_watch_filters_and_principal_isolation(srv: RunningServer) -> None:
    mine = await srv.stub("alice").SendNotification(send_request(idempotency_key="a"))
    theirs = await srv.stub("bob").SendNotification(send_request(idempotency_key="b"))
    bob_view = await events_until(
        srv.stub("bob"),
        pb.WatchEventsRequest(replay_history=True, kinds=[t.EVENT_KIND_ACCEPTED]),
        has_kind(theirs.notification_id, t.EVENT_KIND_ACCEPTED),
    )
    assert {e.notification_id for e in bob_view} == {theirs.notification_id}
    operator_view = await events_until(
        srv.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[mine.notification_id]),
        has_kind(mine.notification_id, t.EVENT_KIND_ACCEPTED),
    )
    assert {e.notification_id for e in operator_view} == {mine.notification_id}


async def test_watch_heartbeat_carries_high_water(db_url: str, tmp_path: Path) -> None:
    running = await start_server(db_url, tmp_path, watch_heartbeat_seconds=0.2)
    try:
        sent = await running.stub("alice").SendNotification(
            send_request(wait_for_first_attempt=True)
        )
        call = running.stub("alice").WatchEvents(pb.WatchEventsRequest(), timeout=None)
        try:
            # The hub learns the settle's events after the RPC returns (on a busy machine a
            # heartbeat or two later): the high water only moves forward until it has them.
            seen = 0
            async for response in call:
                assert response.HasField("heartbeat"), "no events expected from 'now'"
                assert response.heartbeat.high_water_sequence >= seen
                seen = response.heartbeat.high_water_sequence
                if seen >= 5:
                    break
            assert seen >= 5
        finally:
            call.cancel()
        assert sent.state == t.NOTIFICATION_STATE_DELIVERED
        # A stream that replays history (or resumes) but matches nothing is positioned at
        # the high water too, not at its start: its first message is that heartbeat.
        for request in (
            pb.WatchEventsRequest(replay_history=True, kinds=[t.EVENT_KIND_RETENTION_APPLIED]),
            pb.WatchEventsRequest(after_sequence=1, kinds=[t.EVENT_KIND_RETENTION_APPLIED]),
        ):
            call = running.stub("alice").WatchEvents(request, timeout=None)
            try:
                first = await anext(aiter(call))
            finally:
                call.cancel()
            assert first.HasField("heartbeat") and first.heartbeat.high_water_sequence >= 5
    finally:
        await running.stop()


async def test_acknowledge_lifecycle(srv: RunningServer) -> None:
    alice, rita = srv.stub("alice"), srv.stub("rita")
    sent = await alice.SendNotification(send_request(require_ack=True, wait_for_first_attempt=True))
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED and sent.require_ack
    pending = await get(srv, sent.notification_id)
    assert pending.ack_state == t.ACK_STATE_PENDING
    assert pending.ack_deadline_time.seconds - pending.deliver_time.seconds == 60 * 60

    ack = pb.AcknowledgeRequest(notification_id=sent.notification_id)
    ack.metadata.update({"action": "verified"})
    settled = await rita.Acknowledge(ack)
    assert settled.notification.ack_state == t.ACK_STATE_ACKED
    assert settled.notification.ack_actor == "rita" and not settled.idempotent_replay
    again = await rita.Acknowledge(ack)
    assert again.idempotent_replay
    assert again.notification.respond_time == settled.notification.respond_time

    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await rita.Acknowledge(
            pb.AcknowledgeRequest(notification_id=sent.notification_id, dismiss=True)
        )
    assert (rich_error(exc.value).code, rich_error(exc.value).reason) == (
        grpc.StatusCode.ABORTED,
        "ACK_CONFLICT",
    )
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.Acknowledge(ack)
    assert rich_error(exc.value).reason == "PERMISSION_DENIED"

    seen = await events_until(
        alice,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[sent.notification_id]),
        has_kind(sent.notification_id, t.EVENT_KIND_ACKED),
    )
    acked = seen[-1]
    assert acked.payload["actor"] == "rita"
    assert acked.payload["metadata"]["action"] == "verified"


async def test_ack_not_pending_without_require_ack(srv: RunningServer) -> None:
    sent = await srv.stub("alice").SendNotification(send_request(wait_for_first_attempt=True))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await srv.stub("rita").Acknowledge(
            pb.AcknowledgeRequest(notification_id=sent.notification_id)
        )
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "ACK_NOT_PENDING")


async def test_ack_times_out_and_late_acks_are_refused(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    sent = await srv.stub("alice").SendNotification(
        send_request(require_ack=True, wait_for_first_attempt=True)
    )
    clock.advance(minutes=61)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await srv.stub("rita").Acknowledge(
            pb.AcknowledgeRequest(notification_id=sent.notification_id)
        )
    assert rich_error(exc.value).reason == "ACK_DEADLINE_PASSED"
    await srv.app.timers.run_once()  # (or the background sweep, whichever comes first)
    timed_out = await get(srv, sent.notification_id)
    assert timed_out.ack_state == t.ACK_STATE_TIMED_OUT
    assert timed_out.ack_actor == "uns-timeout-worker"
    seen = await events_until(
        srv.stub("alice"),
        pb.WatchEventsRequest(replay_history=True, kinds=[t.EVENT_KIND_TIMED_OUT]),
        has_kind(sent.notification_id, t.EVENT_KIND_TIMED_OUT),
    )
    assert seen[-1].payload["metadata"]["escalation_required"] is True
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await srv.stub("rita").Acknowledge(
            pb.AcknowledgeRequest(notification_id=sent.notification_id)
        )
    assert rich_error(exc.value).reason == "ACK_DEADLINE_PASSED"


async def dead_lettered(srv: RunningServer, db_url: str, key: str, **fields: object) -> str:
    await activate_policy(
        db_url,
        "ops.failing",
        channels=["broken"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        max_attempts=1,
    )
    sent = await srv.stub("alice").SendNotification(
        send_request(notification_type="ops.failing", idempotency_key=key, **fields)
    )
    await events_until(
        srv.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[sent.notification_id]),
        has_kind(sent.notification_id, t.EVENT_KIND_DELIVERY_RESULT),
    )
    return str(sent.notification_id)


async def test_dead_letter_replay_and_resolve(srv: RunningServer, db_url: str) -> None:
    oscar = srv.stub("oscar")
    nid = await dead_lettered(srv, db_url, "dl1")
    failed = await get(srv, nid)
    assert failed.state == t.NOTIFICATION_STATE_FAILED and failed.dead_letter
    assert "broken" in failed.outcome.error_message
    dlq = await oscar.ListNotifications(
        pb.ListNotificationsRequest(filter="state = FAILED AND dead_letter = true")
    )
    assert [n.id for n in dlq.notifications] == [nid]

    replayed = (await oscar.Replay(pb.ReplayRequest(notification_id=nid))).notification
    assert replayed.state == t.NOTIFICATION_STATE_PENDING and replayed.cycle == 2
    assert not replayed.dead_letter
    seen = await events_until(
        oscar,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: kinds(evs).count("DELIVERY_RESULT") == 2,
    )
    assert "REPLAY_REQUESTED" in kinds(seen)
    resolved = (
        await oscar.ResolveFailure(pb.ResolveFailureRequest(notification_id=nid))
    ).notification
    assert resolved.state == t.NOTIFICATION_STATE_FAILED and not resolved.dead_letter
    # Operator actions say who and where, like acknowledgements (via grpc, link, console).
    seen = await events_until(
        oscar,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: "FAILURE_RESOLVED" in kinds(evs),
    )
    for event in seen:
        if event.kind in (t.EVENT_KIND_REPLAY_REQUESTED, t.EVENT_KIND_FAILURE_RESOLVED):
            assert event.payload["actor"] == "oscar" and event.payload["via"] == "grpc", event
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await oscar.Replay(pb.ReplayRequest(notification_id=nid))
    assert rich_error(exc.value).reason == "NOT_DEAD_LETTERED"
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await srv.stub("alice").Replay(pb.ReplayRequest(notification_id=nid))
    assert rich_error(exc.value).reason == "PERMISSION_DENIED"


async def test_validate_only_answers_what_replay_and_resolve_would_and_writes_nothing(
    srv: RunningServer, db_url: str
) -> None:
    oscar = srv.stub("oscar")
    nid = await dead_lettered(srv, db_url, "vo1")
    before = await get(srv, nid)

    would = (
        await oscar.Replay(pb.ReplayRequest(notification_id=nid, reason="r", validate_only=True))
    ).notification
    assert would.state == t.NOTIFICATION_STATE_PENDING and would.cycle == 2
    assert not would.dead_letter and would.cycle_attempts == 0
    would_resolve = (
        await oscar.ResolveFailure(
            pb.ResolveFailureRequest(notification_id=nid, reason="r", validate_only=True)
        )
    ).notification
    assert would_resolve.state == t.NOTIFICATION_STATE_FAILED and not would_resolve.dead_letter
    assert would_resolve.cycle == 1 and would_resolve.outcome == before.outcome
    assert await get(srv, nid) == before  # the row is unchanged

    # Refusals are the real ones, code and reason.
    refusals = [
        (oscar.Replay, pb.ReplayRequest(notification_id=str(uuid.uuid4()), validate_only=True)),
        (oscar.Replay, pb.ReplayRequest(notification_id=nid, reason="\x00", validate_only=True)),
        (srv.stub("alice").Replay, pb.ReplayRequest(notification_id=nid, validate_only=True)),
    ]
    expected = [
        (grpc.StatusCode.NOT_FOUND, "NOT_FOUND"),
        (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST"),
        (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"),
    ]
    for (call, request), (code, reason) in zip(refusals, expected, strict=True):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call(request)
        assert (exc.value.code(), rich_error(exc.value).reason) == (code, reason)

    # The real replay answers what the validation said; no event came before its own.
    done = (await oscar.Replay(pb.ReplayRequest(notification_id=nid, reason="r"))).notification
    for field in ("state", "cycle", "dead_letter", "cycle_attempts", "attempts", "outcome"):
        assert getattr(done, field) == getattr(would, field), field
    seen = await events_until(
        oscar,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: "REPLAY_REQUESTED" in kinds(evs),
    )
    assert kinds(seen).count("REPLAY_REQUESTED") == 1 and "FAILURE_RESOLVED" not in kinds(seen)

    delivered = await srv.stub("alice").SendNotification(
        send_request(idempotency_key="vo2", wait_for_first_attempt=True)
    )
    fine = delivered.notification_id
    for call, request in (
        (oscar.Replay, pb.ReplayRequest(notification_id=fine, validate_only=True)),
        (oscar.ResolveFailure, pb.ResolveFailureRequest(notification_id=fine, validate_only=True)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call(request)  # type: ignore[operator]
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert rich_error(exc.value).reason == "NOT_DEAD_LETTERED"


async def test_dedup_follower_is_satisfied_by_leader(srv: RunningServer) -> None:
    alice = srv.stub("alice")
    leader = await alice.SendNotification(
        send_request(idempotency_key="d1", dedup_key="disk:db-1", wait_for_first_attempt=True)
    )
    assert leader.state == t.NOTIFICATION_STATE_DELIVERED
    follower = await alice.SendNotification(
        send_request(idempotency_key="d2", dedup_key="disk:db-1")
    )
    assert follower.state == t.NOTIFICATION_STATE_DEDUPLICATED
    assert follower.dedup_owner_id == leader.notification_id
    other_key = await alice.SendNotification(
        send_request(idempotency_key="d3", dedup_key="disk:db-2")
    )
    assert other_key.dedup_owner_id == "" and other_key.state == t.NOTIFICATION_STATE_PENDING


async def test_exhausted_leader_hands_off_to_first_follower(
    db_url: str, tmp_path: Path, clock: ShiftableClock
) -> None:
    await activate_policy(
        db_url,
        "ops.failing",
        channels=["broken"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        max_attempts=1,
    )
    # Dispatch off: the followers must join while the leader is still pending.
    srv = await broken_channel_server(db_url, tmp_path, clock, dispatch_enabled=False)
    try:
        alice, oscar = srv.stub("alice"), srv.stub("oscar")
        ids = []
        for i in range(3):
            sent = await alice.SendNotification(
                send_request(
                    notification_type="ops.failing", idempotency_key=f"h{i}", dedup_key="x"
                )
            )
            ids.append(sent.notification_id)
        assert (await srv.app.dispatcher.run_once()).claimed == 1  # only the leader is due
        leader, successor, third = [await get(srv, i) for i in ids]
        assert leader.state == t.NOTIFICATION_STATE_FAILED and leader.dead_letter
        assert leader.dedup_successor_id == ids[1]
        assert successor.state == t.NOTIFICATION_STATE_PENDING and successor.dedup_owner_id == ""
        assert third.dedup_owner_id == ids[1]
        seen = await events_until(
            oscar,
            pb.WatchEventsRequest(replay_history=True),
            lambda evs: "DEDUP_RELINKED" in kinds(evs),
        )
        by_kind = {e.kind: e for e in seen}
        assert by_kind[t.EVENT_KIND_OBLIGATION_HANDED_OFF].payload["successor_id"] == ids[1]
        assert by_kind[t.EVENT_KIND_DEDUP_OWNER_PROMOTED].notification_id == ids[1]
        assert by_kind[t.EVENT_KIND_DEDUP_RELINKED].notification_id == ids[2]
        for validate_only in (True, False):
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await oscar.Replay(
                    pb.ReplayRequest(notification_id=ids[0], validate_only=validate_only)
                )
            assert rich_error(exc.value).reason == "REPLAY_BLOCKED"
    finally:
        await srv.stop()


async def failing_server(db_url: str, tmp_path: Path, clock: ShiftableClock) -> RunningServer:
    """``ops.failing`` (one attempt, GUARANTEED, to the broken channel), dispatch stepped."""
    await activate_policy(
        db_url,
        "ops.failing",
        channels=["broken"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        max_attempts=1,
    )
    return await broken_channel_server(db_url, tmp_path, clock, dispatch_enabled=False)


async def test_exhausted_leader_without_followers_hands_off_to_a_newer_active_owner(
    db_url: str, tmp_path: Path, clock: ShiftableClock
) -> None:
    """Seed 000 §1.1: a replayed leader that exhausts again, with no follower of its
    own, hands its obligation to the newer leader of its dedup key, so that a second
    replay cannot deliver the same alert twice."""
    srv = await failing_server(db_url, tmp_path, clock)
    try:
        alice, oscar = srv.stub("alice"), srv.stub("oscar")

        async def send(key: str) -> str:
            sent = await alice.SendNotification(
                send_request(notification_type="ops.failing", idempotency_key=key, dedup_key="z")
            )
            return str(sent.notification_id)

        old = await send("n1")
        assert (await srv.app.dispatcher.run_once()).claimed == 1
        assert (await get(srv, old)).dead_letter
        newer = await send("n2")  # the failed owner no longer coalesces: a new generation
        assert (await get(srv, newer)).dedup_owner_id == ""
        await oscar.Replay(pb.ReplayRequest(notification_id=old))
        dispatcher = srv.app.dispatcher
        claims = {c.notification.id: c for c in await dispatcher.claim(2)}
        await dispatcher.deliver(claims[old])  # fails again; the newer one is in flight

        exhausted = await get(srv, old)
        assert exhausted.state == t.NOTIFICATION_STATE_FAILED and exhausted.cycle == 2
        assert exhausted.dedup_successor_id == newer
        seen = await events_until(
            oscar,
            pb.WatchEventsRequest(replay_history=True, notification_ids=[old, newer]),
            lambda evs: "OBLIGATION_HANDED_OFF" in kinds(evs),
        )
        handed = next(e for e in seen if e.kind == t.EVENT_KIND_OBLIGATION_HANDED_OFF)
        assert handed.notification_id == old
        assert dict(handed.payload) == {"successor_id": newer, "generation": 2}
        assert "DEDUP_OWNER_PROMOTED" not in kinds(seen)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await oscar.Replay(pb.ReplayRequest(notification_id=old))
        assert rich_error(exc.value).reason == "REPLAY_BLOCKED"
    finally:
        await srv.stop()


async def test_interrupted_last_attempt_of_a_leader_promotes_its_follower(
    db_url: str, tmp_path: Path, clock: ShiftableClock
) -> None:
    """A leader whose only attempt was interrupted is settled as exhausted when its
    lease is recovered, with the same hand-off as an exhausted retry."""
    srv = await failing_server(db_url, tmp_path, clock)
    try:
        alice = srv.stub("alice")
        ids = []
        for key in ("i1", "i2"):
            sent = await alice.SendNotification(
                send_request(notification_type="ops.failing", idempotency_key=key, dedup_key="w")
            )
            ids.append(sent.notification_id)
        assert len(await srv.app.dispatcher.claim(1)) == 1  # then the worker dies
        clock.advance(minutes=5)  # past the lease
        assert (await srv.app.dispatcher.run_once()).claimed == 0
        leader, follower = [await get(srv, i) for i in ids]
        assert leader.state == t.NOTIFICATION_STATE_FAILED and leader.dead_letter
        assert leader.cycle_attempts == 1 and leader.dedup_successor_id == ids[1]
        assert follower.state == t.NOTIFICATION_STATE_PENDING and follower.dedup_owner_id == ""
    finally:
        await srv.stop()


async def test_shutdown_ends_streams_with_a_resumable_status(db_url: str, tmp_path: Path) -> None:
    running = await start_server(db_url, tmp_path)
    sent = await running.stub("alice").SendNotification(send_request(wait_for_first_attempt=True))
    call = running.stub("alice").WatchEvents(
        pb.WatchEventsRequest(replay_history=True), timeout=None
    )
    last = 0
    async for response in call:
        last = response.event.sequence
        if response.event.kind == t.EVENT_KIND_DELIVERY_RESULT:
            break
    stopping = asyncio.create_task(running.app.stop(grace=5))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        async for _ in call:
            pass
    await stopping
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
    assert int(err.metadata["resume_after_sequence"]) == last
    assert sent.notification_id
    for channel in running.channels:
        await channel.close()
