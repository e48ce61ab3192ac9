"""Retention maintenance on both dialects: what it prunes, what it never prunes, the
RETENTION_APPLIED receipt, idempotency-key expiry, and ``uns-admin maintain`` as a real
subprocess. Data is made through the real API (webhook to a loopback receiver, dispatch
stepped with ``run_once()``); retention runs with an explicit ``now`` in the future or,
for the CLI, against rows written by a server whose clock was moved into the past."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from sqlalchemy import select

from tests.support.admin_cli import admin, ok
from tests.support.grpc_errors import rich_error
from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.domain.retention import RetentionPolicy, prunable
from uns_server.services.retention import Report, RetentionService
from uns_server.store.tables import dedup, events, notifications

OK = Reply(status=200)
FAIL = Reply(status=500)


@dataclass
class Rig:
    server: RunningServer
    receiver: HttpReceiver
    clock: ShiftableClock

    async def send(self, notification_type: str, key: str, **fields: object) -> str:
        sent = await self.server.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=key, **fields)
        )
        return str(sent.notification_id)

    async def dispatch(self, reply: Reply = OK) -> int:
        """One dispatch batch (past any backoff), every channel call answered ``reply``."""
        self.receiver.default = reply
        self.clock.advance(minutes=1)
        return (await self.server.app.dispatcher.run_once()).claimed

    async def get(self, notification_id: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=notification_id)
        )
        return reply.notification

    async def exists(self, notification_id: str) -> bool:
        try:
            await self.get(notification_id)
        except grpc.aio.AioRpcError as err:
            assert rich_error(err).reason == "NOT_FOUND"
            return False
        return True

    async def event_count(self, notification_id: str) -> int:
        async with self.server.app.db.read() as conn:
            q = select(events.c.sequence).where(events.c.notification_id == notification_id)
            return len((await conn.execute(q)).all())

    async def receipts(self) -> list[dict[str, object]]:
        async with self.server.app.db.read() as conn:
            q = select(events).where(events.c.kind == "RETENTION_APPLIED")
            return [dict(r) for r in (await conn.execute(q.order_by(events.c.sequence))).mappings()]

    async def dedup_keys(self) -> set[str]:
        async with self.server.app.db.read() as conn:
            return set((await conn.execute(select(dedup.c.key))).scalars())

    async def run(self, apply: bool, *, days: float = 40, **policy: float) -> Report:
        policy_ = RetentionPolicy(**policy)
        retention = RetentionService(self.server.app.store, policy_, operator="test-op")
        return await retention.run_once(apply, self.clock() + timedelta(days=days))


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n"
            "  secret: whsec_cmV0ZW50aW9uLXRlc3Qtc2VjcmV0\n  timeout_seconds: 1\n"
        )
        for name, mode, require_ack in (
            ("ops.plain", DeliveryMode.GUARANTEED, False),
            ("ops.ack", DeliveryMode.GUARANTEED, True),
            ("ops.besteffort", DeliveryMode.BEST_EFFORT, False),
        ):
            await activate_policy(
                db_url,
                name,
                channels=["hook"],
                delivery_mode=mode,
                require_ack=require_ack,
                max_attempts=1,
            )
        clock = ShiftableClock()
        server = await start_server(
            db_url, tmp_path, clock=clock, channels_file=str(channels), dispatch_enabled=False
        )
        try:
            yield Rig(server, receiver, clock)
        finally:
            await server.stop()


async def test_prunes_settled_history_and_never_pending_work(rig: Rig) -> None:
    ids: dict[str, str] = {}
    ids["delivered"] = await rig.send("ops.plain", "a")
    assert await rig.dispatch() == 1
    ids["ack_pending"] = await rig.send("ops.ack", "b")
    assert await rig.dispatch() == 1
    ids["acked"] = await rig.send("ops.ack", "c")
    assert await rig.dispatch() == 1
    await rig.server.stub("rita").Acknowledge(pb.AcknowledgeRequest(notification_id=ids["acked"]))
    ids["dead_letter"] = await rig.send("ops.plain", "e")
    assert await rig.dispatch(FAIL) == 1
    ids["resolved"] = await rig.send("ops.plain", "f")
    assert await rig.dispatch(FAIL) == 1
    await rig.server.stub("oscar").ResolveFailure(
        pb.ResolveFailureRequest(notification_id=ids["resolved"])
    )
    ids["best_effort"] = await rig.send("ops.besteffort", "g")
    assert await rig.dispatch(FAIL) == 1
    # A dead-lettered leader handed its obligation to a follower, which was delivered.
    ids["handed_off"] = await rig.send("ops.plain", "j1", dedup_key="chain")
    ids["successor"] = await rig.send("ops.plain", "j2", dedup_key="chain")
    assert await rig.dispatch(FAIL) == 1
    assert await rig.dispatch() == 1
    handed_off = await rig.get(ids["handed_off"])
    assert handed_off.dead_letter and handed_off.dedup_successor_id == ids["successor"]
    assert (await rig.get(ids["successor"])).state == t.NOTIFICATION_STATE_DELIVERED
    # A storm: a delivered leader and a follower deduplicated inside its window.
    ids["storm_leader"] = await rig.send("ops.plain", "i1", dedup_key="storm")
    assert await rig.dispatch() == 1
    ids["storm_follower"] = await rig.send("ops.plain", "i2", dedup_key="storm")
    assert (await rig.get(ids["storm_follower"])).state == t.NOTIFICATION_STATE_DEDUPLICATED
    # Pending work, never dispatched: a plain one, and a leader with a pending follower.
    ids["pending"] = await rig.send("ops.plain", "d")
    ids["pending_leader"] = await rig.send("ops.plain", "h1", dedup_key="pend")
    ids["pending_follower"] = await rig.send("ops.plain", "h2", dedup_key="pend")
    windows_before = await rig.dedup_keys()
    assert len(windows_before) == 3

    pruned = {"delivered", "acked", "resolved", "best_effort", "storm_leader", "storm_follower"}
    kept = set(ids) - pruned
    pruned_events = {name: await rig.event_count(ids[name]) for name in pruned}
    kept_events = {name: await rig.event_count(ids[name]) for name in kept}

    dry = await rig.run(apply=False)
    assert not dry.applied and dry.receipt_id is None
    assert set(dry.notification_ids) == {ids[n] for n in pruned}
    assert dry.kept_for_dedup_groups == 1  # the successor: its dead-lettered leader stays
    assert dry.deleted_rows["uns_notifications"] == len(pruned)
    assert len(dry.dedup_keys) == 2  # storm and chain; "pend" has a PENDING owner
    assert dry.idempotency_keys_expired == 1  # the kept successor: settled and old
    assert await rig.receipts() == []  # a dry run writes nothing
    assert all([await rig.exists(ids[n]) for n in ids])

    applied = await rig.run(apply=True)
    assert applied.applied and applied.receipt_id
    assert applied.notification_ids == dry.notification_ids
    assert applied.deleted_rows == dry.deleted_rows
    assert applied.dedup_keys == dry.dedup_keys
    assert applied.idempotency_keys_expired == dry.idempotency_keys_expired
    assert applied.compacted_sequence == dry.compacted_sequence > 0

    for name in pruned:
        assert not await rig.exists(ids[name]), name
        assert await rig.event_count(ids[name]) == 0, name
    for name in kept:
        assert await rig.exists(ids[name]), name
    # Timelines of rows that hold work are untouched; the settled successor's old
    # events are trimmed (events older than --events-days), its row stays.
    for name in kept - {"successor"}:
        assert await rig.event_count(ids[name]) == kept_events[name], name
    assert await rig.event_count(ids["successor"]) == 0
    assert (
        applied.deleted_rows["uns_events"]
        == sum(pruned_events.values()) + (kept_events["successor"])
    )
    assert await rig.dedup_keys() == windows_before - set(applied.dedup_keys)

    [receipt] = await rig.receipts()
    assert receipt["notification_id"] == applied.receipt_id
    assert receipt["principal"] == "uns-maintenance"
    payload = receipt["payload"]
    assert isinstance(payload, dict)
    assert payload["operator"] == "test-op"
    assert payload["deleted_rows"] == applied.deleted_rows
    assert set(payload["notification_ids"]) == {ids[n] for n in pruned}
    assert payload["notification_count"] == len(pruned)
    assert sorted(payload["dedup_keys"]) == sorted(applied.dedup_keys)
    assert payload["cutoff"]["terminal"] == applied.cutoffs.terminal.isoformat()
    async with rig.server.app.store.read() as tx:
        assert await tx.retention.compacted_sequence() == applied.compacted_sequence

    # Nothing left to prune; the first receipt survives the second run.
    again = await rig.run(apply=True, days=80)
    assert again.notification_ids == () and again.deleted_rows["uns_events"] == 0
    assert [r["notification_id"] for r in await rig.receipts()] == [
        applied.receipt_id,
        again.receipt_id,
    ]
    assert again.compacted_sequence == applied.compacted_sequence

    # The pending work is intact and still gets done; the dead letter can be replayed.
    assert await rig.dispatch() == 2  # "pending" and the pending leader
    assert (await rig.get(ids["pending"])).state == t.NOTIFICATION_STATE_DELIVERED
    follower = await rig.get(ids["pending_follower"])
    assert follower.state == t.NOTIFICATION_STATE_DEDUPLICATED
    await rig.server.stub("rita").Acknowledge(
        pb.AcknowledgeRequest(notification_id=ids["ack_pending"])
    )
    await rig.server.stub("oscar").Replay(pb.ReplayRequest(notification_id=ids["dead_letter"]))


async def test_live_dedup_window_keeps_its_leader_and_followers(rig: Rig, db_url: str) -> None:
    await activate_policy(
        db_url,
        "ops.window",
        channels=["hook"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        dedup_window_seconds=86_400,
        max_attempts=1,
    )
    leader = await rig.send("ops.window", "w1", dedup_key="day")
    assert await rig.dispatch() == 1
    follower = await rig.send("ops.window", "w2", dedup_key="day")
    assert (await rig.get(follower)).state == t.NOTIFICATION_STATE_DEDUPLICATED

    # Settled and older than the terminal cutoff, but the window can still coalesce.
    inside = await rig.run(apply=True, days=0.5, terminal_days=0.25)
    assert inside.notification_ids == () and inside.kept_for_dedup_groups == 2
    assert await rig.exists(leader) and await rig.exists(follower)
    again = await rig.send("ops.window", "w3", dedup_key="day")
    assert (await rig.get(again)).dedup_owner_id == leader

    after = await rig.run(apply=True, days=3, terminal_days=0.25)
    assert set(after.notification_ids) == {leader, follower, again}
    assert after.deleted_rows["uns_dedup"] == 1


async def test_idempotency_keys_expire_to_a_tombstone(rig: Rig) -> None:
    settled = await rig.send("ops.plain", "same-key")
    assert await rig.dispatch() == 1
    pending = await rig.send("ops.plain", "pending-key")

    report = await rig.run(apply=True, days=1, terminal_days=365, idempotency_seconds=3600)
    assert report.notification_ids == () and report.idempotency_keys_expired == 1
    async with rig.server.app.db.read() as conn:
        q = select(notifications.c.id, notifications.c.key)
        keys = {row.id: row.key for row in await conn.execute(q)}
    assert keys[settled] == f"expired:{settled}"
    assert len(keys[pending]) == 64  # still the digest: pending work keeps its key

    # The expired key no longer matches: the same request is a new obligation.
    fresh = await rig.server.stub("alice").SendNotification(
        send_request(notification_type="ops.plain", idempotency_key="same-key")
    )
    assert not fresh.idempotent_replay and fresh.notification_id != settled
    replay = await rig.server.stub("alice").SendNotification(
        send_request(notification_type="ops.plain", idempotency_key="pending-key")
    )
    assert replay.idempotent_replay and replay.notification_id == pending
    assert await rig.exists(settled)  # the row itself stays until its own cutoff


def test_dedup_groups_are_pruned_whole_or_not_at_all() -> None:
    # a-b-c linked, c is not a candidate: the whole chain stays. d-e both go.
    links = [("a", "b"), ("b", "c"), ("d", "e")]
    assert prunable({"a", "b", "d", "e", "f"}, links, pinned=()) == {"d", "e", "f"}
    assert prunable({"d", "e", "f"}, links, pinned={"e"}) == {"f"}
    with pytest.raises(Exception, match="terminal_days"):
        RetentionPolicy(terminal_days=-1)


async def test_uns_admin_maintain_dry_run_apply_and_json(db_url: str, tmp_path: Path) -> None:
    clock = ShiftableClock()
    clock.advance(days=-40)  # everything below happened 40 days ago
    server = await start_server(db_url, tmp_path, clock=clock, dispatch_enabled=False)
    try:
        alice = server.stub("alice")
        done = (await alice.SendNotification(send_request(idempotency_key="x"))).notification_id
        assert (await server.app.dispatcher.run_once()).claimed == 1
        waiting = (await alice.SendNotification(send_request(idempotency_key="y"))).notification_id

        dry = ok(await admin(db_url, "maintain"))
        assert "dry run" in dry.out and "would delete 1 notifications" in dry.out
        assert f"notification {done}" in dry.out and waiting not in dry.out

        dry_json = json.loads(ok(await admin(db_url, "maintain", "--json")).out)
        assert dry_json["applied"] is False and dry_json["notification_ids"] == [done]
        assert dry_json["deleted_rows"]["uns_notifications"] == 1

        applied = json.loads(
            ok(await admin(db_url, "maintain", "--apply", "--json", "--events-days", "60")).out
        )
        assert applied["applied"] is True and applied["notification_ids"] == [done]
        assert applied["receipt_id"] and applied["compacted_sequence"] > 0
        assert applied["operator"].startswith("uns-admin:")

        oscar = server.stub("oscar")
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await oscar.GetNotification(pb.GetNotificationRequest(notification_id=done))
        assert rich_error(gone.value).reason == "NOT_FOUND"
        kept = await oscar.GetNotification(pb.GetNotificationRequest(notification_id=waiting))
        assert kept.notification.state == t.NOTIFICATION_STATE_PENDING

        nothing = ok(await admin(db_url, "maintain", "--apply"))
        assert "applied: deleted 0 notifications" in nothing.out
        assert "receipt: RETENTION_APPLIED" in nothing.out

        bad = await admin(db_url, "maintain", "--terminal-days", "-1")
        assert bad.code == 2 and "terminal_days" in bad.err
    finally:
        await server.stop()


async def test_withdrawn_is_terminal_and_scheduled_work_is_kept(rig: Rig) -> None:
    scheduled = rig.clock() + timedelta(days=80)
    when = pb.SendNotificationRequest().schedule_time
    when.FromDatetime(scheduled)
    withdrawn = await rig.send("ops.plain", "w", schedule_time=when)
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=withdrawn)
    )
    ack_withdrawn = await rig.send("ops.ack", "aw")
    assert await rig.dispatch() == 1
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=ack_withdrawn)
    )
    pending = await rig.send("ops.plain", "s", schedule_time=when)
    report = await rig.run(apply=True)
    assert {withdrawn, ack_withdrawn} <= set(report.notification_ids)
    assert pending not in report.notification_ids
    assert not await rig.exists(withdrawn) and not await rig.exists(ack_withdrawn)
    kept = await rig.get(pending)  # a schedule 80 days ahead is pending work
    assert kept.state == t.NOTIFICATION_STATE_PENDING and kept.HasField("schedule_time")
