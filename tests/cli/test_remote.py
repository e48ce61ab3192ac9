"""``uns-admin dlq | show | ack`` as a real subprocess against a real server (over gRPC,
not the database), on SQLite: the dead-letter queue, bulk replay and resolve with
a dry run and a reason, per-id refusals, one notification's timeline, acknowledgements,
and a producer key refused with a clear message."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.admin_cli import Result, ok
from tests.support.admin_cli import remote as cli
from tests.support.policies import activate_policy
from tests.support.ports import closed_port
from tests.support.server import KEYS, RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, has_kind, kinds
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, InvalidRequest
from uns_server.domain.enums import DeliveryMode

FAILING = "ops.failing"
OTHER = "ops.other"


async def start_broken(db_url: str, tmp_path: Path, **overrides: object) -> RunningServer:
    """A server with a `broken` webhook channel (nothing listens) and policies that
    dead-letter after one attempt on it."""
    for notification_type in (FAILING, OTHER):
        await activate_policy(
            db_url,
            notification_type,
            channels=["broken"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=False,
            max_attempts=1,
        )
    channels = tmp_path / "channels.yaml"
    channels.write_text(
        f"broken:\n  type: webhook\n  url: http://127.0.0.1:{closed_port()}/hook\n"
        "  secret: test-secret\n  timeout_seconds: 2\n"
    )
    return await start_server(
        db_url, tmp_path, clock=ShiftableClock(), channels_file=str(channels), **overrides
    )


@pytest.fixture
async def srv(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_broken(db_url, tmp_path)
    try:
        yield running
    finally:
        await running.stop()


async def dead_letters(srv: RunningServer, *types: str) -> list[str]:
    """One dead letter per type given, each after its first (failed) attempt."""
    ids = []
    for i, notification_type in enumerate(types):
        sent = await srv.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=f"dl-{i}")
        )
        ids.append(sent.notification_id)
    for nid in ids:
        await events_until(
            srv.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
            has_kind(nid, t.EVENT_KIND_DELIVERY_RESULT),
        )
    return ids


async def delivered(srv: RunningServer, **fields: object) -> str:
    sent = await srv.stub("alice").SendNotification(
        send_request(idempotency_key="ok", wait_for_first_attempt=True, **fields)
    )
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED
    return str(sent.notification_id)


async def get(srv: RunningServer, nid: str) -> t.Notification:
    reply = await srv.stub("oscar").GetNotification(pb.GetNotificationRequest(notification_id=nid))
    notification: t.Notification = reply.notification
    return notification


async def timeline(srv: RunningServer, nid: str, kind: int) -> list[t.Event]:
    return await events_until(
        srv.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, kind),
    )


def lines_of(result: Result) -> dict[str, str]:
    """Batch output: notification id -> the rest of its line."""
    return {line.split()[0]: line for line in result.out.splitlines() if line.strip()}


async def test_dlq_list_shows_exactly_the_dead_letters(srv: RunningServer) -> None:
    failing, other = await dead_letters(srv, FAILING, OTHER)
    fine = await delivered(srv)

    listed = ok(await cli(srv, "oscar", "dlq", "list", "--json"))
    assert {n["id"] for n in json.loads(listed.out)} == {failing, other}
    assert all(
        n["dead_letter"] and n["state"] == "NOTIFICATION_STATE_FAILED"
        for n in json.loads(listed.out)
    )

    table = ok(await cli(srv, "oscar", "dlq", "list"))
    header, *rows = table.out.splitlines()
    assert header.split()[:3] == ["ID", "TYPE", "PRINCIPAL"]
    assert {r.split()[0] for r in rows} == {failing, other} and fine not in table.out
    assert "broken" in table.out  # the error column
    assert "2 dead letters" in table.err

    typed = ok(await cli(srv, "oscar", "dlq", "list", "--type", OTHER, "--json"))
    assert [n["id"] for n in json.loads(typed.out)] == [other]


async def test_bulk_replay_dry_run_changes_nothing_and_the_reason_is_recorded(
    srv: RunningServer,
) -> None:
    ids = await dead_letters(srv, FAILING, FAILING, OTHER)

    dry = ok(
        await cli(
            srv, "oscar", "dlq", "replay", "--all", "--type", FAILING, "--reason", "x", "--dry-run"
        )
    )
    assert set(lines_of(dry)) == set(ids[:2])
    assert all("would replay" in line and "cycle 1 -> 2" in line for line in lines_of(dry).values())
    assert "nothing changed" in dry.err
    for nid in ids:
        unchanged = await get(srv, nid)
        assert unchanged.state == t.NOTIFICATION_STATE_FAILED and unchanged.dead_letter
        assert unchanged.cycle == 1

    replayed = ok(
        await cli(
            srv, "oscar", "dlq", "replay", "--all", "--type", FAILING, "--reason", "webhook fixed"
        )
    )
    assert set(lines_of(replayed)) == set(ids[:2])
    assert all("replayed" in line for line in lines_of(replayed).values())
    for nid in ids[:2]:
        seen = await timeline(srv, nid, t.EVENT_KIND_REPLAY_REQUESTED)
        (event,) = [e for e in seen if e.kind == t.EVENT_KIND_REPLAY_REQUESTED]
        assert event.payload["reason"] == "webhook fixed"
        assert event.payload["actor"] == "oscar" and event.payload["cycle"] == 2
    untouched = await get(srv, ids[2])
    assert untouched.cycle == 1 and untouched.dead_letter  # another type


async def test_resolve_reports_refusals_per_id_and_goes_on(srv: RunningServer) -> None:
    first, second = await dead_letters(srv, FAILING, OTHER)
    fine = await delivered(srv)

    dry = await cli(srv, "oscar", "dlq", "resolve", first, fine, "--reason", "r", "--dry-run")
    assert dry.code == 1, dry
    assert "would resolve" in lines_of(dry)[first]
    assert "would refuse" in lines_of(dry)[fine] and "NOT_DEAD_LETTERED" in lines_of(dry)[fine]
    assert (await get(srv, first)).dead_letter

    result = await cli(srv, "oscar", "dlq", "resolve", first, fine, second, "--reason", "phoned")
    assert result.code == 1, result
    outcome = lines_of(result)
    assert list(outcome) == [first, fine, second]
    assert "resolved" in outcome[first] and "resolved" in outcome[second]
    assert "refused" in outcome[fine] and "NOT_DEAD_LETTERED" in outcome[fine]
    for nid in (first, second):
        now = await get(srv, nid)
        assert now.state == t.NOTIFICATION_STATE_FAILED and not now.dead_letter
        seen = await timeline(srv, nid, t.EVENT_KIND_FAILURE_RESOLVED)
        assert seen[-1].payload["reason"] == "phoned"
    assert ok(await cli(srv, "oscar", "dlq", "list", "--json")).out.strip() == "[]"

    # JSON outcomes: a resolved row is no dead letter any more.
    again = await cli(srv, "oscar", "dlq", "replay", first, "--reason", "r", "--json")
    assert again.code == 1
    (item,) = json.loads(again.out)
    assert item["outcome"] == "refused" and item["error"]["reason"] == "NOT_DEAD_LETTERED"


async def test_replay_blocked_is_reported_per_id(db_url: str, tmp_path: Path) -> None:
    # Dispatch off: the followers join while the leader is pending; one pass then
    # dead-letters the leader (its successor takes over, PENDING) and a lone failure.
    srv = await start_broken(db_url, tmp_path, dispatch_enabled=False)
    try:
        alice = srv.stub("alice")
        lone = await alice.SendNotification(
            send_request(notification_type=FAILING, idempotency_key="lone")
        )
        group = [
            await alice.SendNotification(
                send_request(notification_type=FAILING, idempotency_key=f"g{i}", dedup_key="x")
            )
            for i in range(2)
        ]
        leader = group[0].notification_id
        while (await srv.app.dispatcher.run_once()).claimed:
            if (await get(srv, leader)).dead_letter and (
                await get(srv, lone.notification_id)
            ).dead_letter:
                break
        assert (await get(srv, leader)).dedup_successor_id == group[1].notification_id

        dry = await cli(srv, "oscar", "dlq", "replay", "--all", "--reason", "r", "--dry-run")
        assert dry.code == 1, dry
        assert "REPLAY_BLOCKED" in lines_of(dry)[leader]
        assert "would replay" in lines_of(dry)[lone.notification_id]

        result = await cli(srv, "oscar", "dlq", "replay", "--all", "--reason", "r")
        assert result.code == 1, result
        assert "refused" in lines_of(result)[leader]
        assert "REPLAY_BLOCKED" in lines_of(result)[leader]
        assert "replayed" in lines_of(result)[lone.notification_id]
        assert (await get(srv, lone.notification_id)).state == t.NOTIFICATION_STATE_PENDING
        assert (await get(srv, leader)).dead_letter
    finally:
        await srv.stop()


async def test_show_prints_the_timeline(srv: RunningServer) -> None:
    (nid,) = await dead_letters(srv, FAILING)
    ok(await cli(srv, "oscar", "dlq", "replay", nid, "--reason", "try again"))
    expected = await events_until(
        srv.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: kinds(evs).count("DELIVERY_RESULT") == 2,
    )

    shown = ok(await cli(srv, "oscar", "show", nid, "--json"))
    document = json.loads(shown.out)
    assert document["notification"]["id"] == nid
    assert [e["id"] for e in document["events"]] == [e.id for e in expected]

    human = ok(await cli(srv, "oscar", "show", nid))
    assert human.out.startswith(f"notification {nid}")
    assert f"timeline: {len(expected)} events" in human.out
    table = human.out.split("timeline:")[1].splitlines()[2:]
    assert [row.split()[2] for row in table] == kinds(expected)
    assert [row.split()[0] for row in table] == [str(e.sequence) for e in expected]
    (replay_row,) = [row for row in table if "REPLAY_REQUESTED" in row]
    assert '"reason":"try again"' in replay_row

    missing = await cli(srv, "oscar", "show", "00000000-0000-4000-8000-000000000000")
    assert missing.code == 1 and "NOT_FOUND" in missing.err


async def test_ack_and_dismiss(srv: RunningServer) -> None:
    nid = await delivered(srv, require_ack=True)
    acked = ok(await cli(srv, "rita", "ack", nid, "--metadata", '{"ticket": "OPS-1"}'))
    assert f"{nid}  ACKED by rita" in acked.out
    settled = await get(srv, nid)
    assert settled.ack_state == t.ACK_STATE_ACKED
    assert settled.response_metadata["ticket"] == "OPS-1"

    conflict = await cli(srv, "rita", "ack", nid, "--dismiss")
    assert conflict.code == 1 and "ACK_CONFLICT" in conflict.err

    # Operators may acknowledge too (every tenant), and may be told who settled it.
    operator = await cli(srv, "oscar", "ack", nid, "--dismiss")
    assert operator.code == 1 and "ACK_CONFLICT" in operator.err and "by rita" in operator.err

    producer = await cli(srv, "alice", "ack", nid)
    assert producer.code == 1 and "responder or operator role" in producer.err


async def test_a_producer_key_is_refused_with_a_clear_message(srv: RunningServer) -> None:
    (nid,) = await dead_letters(srv, FAILING)
    # A dry run is the server's own answer (validate_only), so it is refused alike
    # instead of predicting a replay that the real run could not do.
    for args in (
        ("dlq", "replay", nid),
        ("dlq", "replay", "--all"),
        ("dlq", "resolve", nid),
        ("dlq", "replay", nid, "--dry-run"),
        ("dlq", "resolve", nid, "--dry-run"),
    ):
        result = await cli(srv, "alice", *args, "--reason", "r")
        assert result.code == 1, result
        assert "PERMISSION_DENIED" in result.err and "operator role" in result.err
        assert "Traceback" not in result.err
    still = await get(srv, nid)
    assert still.dead_letter and still.cycle == 1


async def test_usage_errors_exit_2(srv: RunningServer) -> None:
    for args in (
        ("dlq", "replay", "--reason", "r"),  # neither ids nor --all
        ("dlq", "replay", "--all", "00000000-0000-4000-8000-000000000000", "--reason", "r"),
        ("dlq", "resolve", "not-a-uuid", "--reason", "r"),
        ("dlq", "resolve", "--all", "--reason", "x" * 1025),
        ("dlq", "replay", "--all"),  # --reason is required
        ("ack", "00000000-0000-4000-8000-000000000000", "--metadata", "[1]"),
    ):
        result = await cli(srv, "oscar", *args)
        assert result.code == 2, (args, result)


async def test_server_refuses_an_oversized_reason(srv: RunningServer) -> None:
    (nid,) = await dead_letters(srv, FAILING)
    async with AsyncClient(srv.target, api_key=KEYS["oscar"]) as oscar:
        for call in (oscar.replay, oscar.resolve_failure):
            with pytest.raises(InvalidRequest) as exc:
                await call(nid, reason="x" * 1025)
            assert "reason" in exc.value.violations
        resolved = await oscar.resolve_failure(nid, reason="y" * 1024)
    assert not resolved.dead_letter
