"""Role checks and principal isolation on every RPC (SPEC §3, issue 8 item 3).

Roles (SPEC §3): ``producer`` sends, simulates, and gets/lists/watches its *own*
notifications; ``responder`` acknowledges, gets and watches the notifications of its
tenants (here rita answers for alice and bob, through the key file's ``responds_for``);
``operator`` replays, resolves failures, manages policies, reads the audit trail and
gets/lists/watches/acknowledges everything. Every role-by-tenant cell, for keys that
hold several roles too, is in ``test_tenancy``.

A producer asking for an id it may not see gets exactly the NOT_FOUND a random unknown
id gets (same code, reason, message and ErrorInfo metadata keys), so existence never
leaks; role refusals come before any lookup, so they cannot leak it either. Idempotency
and dedup scopes include the principal, so Simulate/Send cannot probe another
principal's keys.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from tests.security.rpcs import ALL_RPCS, OK, UNKNOWN_ID, Callers, Outcome
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import audit_service_pb2 as apb
from uns.v1 import key_service_pb2 as kpb
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import types_pb2 as t

PD = "PERMISSION_DENIED"
POLICY_TYPE = "sec.isolation"
ANONYMOUS = {
    "no credentials": None,
    "unknown key": "Bearer uns_not_a_key_of_this_server_000000000000000000",
    "malformed scheme": "Basic dXNlcjpwYXNz",
    "empty bearer": "Bearer ",
}


@dataclass
class World:
    server: RunningServer
    callers: Callers
    alice_id: str  # alice's notification
    bob_id: str  # bob's notification


@pytest.fixture
async def world(db_url: str, tmp_path: Path) -> AsyncIterator[World]:
    # Dispatch off: notifications stay PENDING, so outcomes below are deterministic.
    server = await start_server(db_url, tmp_path, dispatch_enabled=False)
    try:
        callers = Callers(server)
        alice = await callers("alice").call(
            "NotificationService/SendNotification",
            send_request(idempotency_key="alice-key", dedup_key="alice-dedup", source="alice-src"),
        )
        bob = await callers("bob").call(
            "NotificationService/SendNotification", send_request(source="bob-src")
        )
        put = await callers("oscar").call(
            "PolicyService/PutPolicyRevision",
            ppb.PutPolicyRevisionRequest(
                notification_type=POLICY_TYPE,
                spec=ppb.PolicySpec(channels=["log"], delivery_mode=t.DELIVERY_MODE_GUARANTEED),
            ),
        )
        assert OK == alice.reason == bob.reason == put.reason
        yield World(server, callers, alice.response.notification_id, bob.response.notification_id)
    finally:
        await server.stop()


Request = Callable[[World], Message]

# rpc -> (request about alice's notification, expected outcome per caller).
ROLE_TABLE: dict[str, tuple[Request, dict[str, str]]] = {
    "NotificationService/SendNotification": (
        lambda w: send_request(),
        {"alice": OK, "bob": OK, "rita": PD, "oscar": PD},
    ),
    "NotificationService/BatchSendNotifications": (
        lambda w: pb.BatchSendNotificationsRequest(requests=[send_request()]),
        {"alice": OK, "bob": OK, "rita": PD, "oscar": PD},
    ),
    "NotificationService/Simulate": (
        lambda w: pb.SimulateRequest(request=send_request()),
        {"alice": OK, "bob": OK, "rita": PD, "oscar": PD},
    ),
    "NotificationService/GetNotification": (
        lambda w: pb.GetNotificationRequest(notification_id=w.alice_id),
        # bob: alice's id is invisible to him; rita responds for alice.
        {"alice": OK, "bob": "NOT_FOUND", "rita": OK, "oscar": OK},
    ),
    "NotificationService/ListNotifications": (
        lambda w: pb.ListNotificationsRequest(),
        {"alice": OK, "bob": OK, "rita": PD, "oscar": OK},  # bob: only his own rows
    ),
    "NotificationService/WatchEvents": (
        lambda w: pb.WatchEventsRequest(replay_history=True),
        {"alice": OK, "bob": OK, "rita": OK, "oscar": OK},  # bob: only his own events
    ),
    "NotificationService/Acknowledge": (
        lambda w: pb.AcknowledgeRequest(notification_id=w.alice_id),
        # rita and oscar pass the role and tenant checks; the PENDING notification
        # has no ack to settle.
        {"alice": PD, "bob": PD, "rita": "ACK_NOT_PENDING", "oscar": "ACK_NOT_PENDING"},
    ),
    "NotificationService/SnoozeNotification": (
        lambda w: pb.SnoozeNotificationRequest(
            notification_id=w.alice_id, duration=Duration(seconds=60)
        ),
        # As Acknowledge: whoever may answer may snooze; nothing is pending yet.
        {"alice": PD, "bob": PD, "rita": "ACK_NOT_PENDING", "oscar": "ACK_NOT_PENDING"},
    ),
    "NotificationService/Replay": (
        lambda w: pb.ReplayRequest(notification_id=w.alice_id),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": "NOT_DEAD_LETTERED"},
    ),
    "NotificationService/ResolveFailure": (
        lambda w: pb.ResolveFailureRequest(notification_id=w.alice_id),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": "NOT_DEAD_LETTERED"},
    ),
    "NotificationService/WithdrawNotification": (
        lambda w: pb.WithdrawNotificationRequest(notification_id=w.alice_id),
        # In this order: alice (the owner) withdraws it; bob cannot see it; rita's role
        # does not allow it; oscar then finds it withdrawn by someone else.
        {"alice": OK, "bob": "NOT_FOUND", "rita": PD, "oscar": "NOT_WITHDRAWABLE"},
    ),
    "PolicyService/PutPolicyRevision": (
        lambda w: ppb.PutPolicyRevisionRequest(
            notification_type=POLICY_TYPE,
            spec=ppb.PolicySpec(channels=["log"], delivery_mode=t.DELIVERY_MODE_GUARANTEED),
        ),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "PolicyService/ActivatePolicyRevision": (
        lambda w: ppb.ActivatePolicyRevisionRequest(notification_type=POLICY_TYPE, revision=1),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "PolicyService/GetPolicy": (
        lambda w: ppb.GetPolicyRequest(notification_type=POLICY_TYPE, revision=1),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "PolicyService/ListPolicyRevisions": (
        lambda w: ppb.ListPolicyRevisionsRequest(notification_type=POLICY_TYPE),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "AuditService/ListDeliveryAuditRecords": (
        lambda w: apb.ListDeliveryAuditRecordsRequest(notification_id=w.alice_id),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "AuditService/ListAckAuditRecords": (
        lambda w: apb.ListAckAuditRecordsRequest(notification_id=w.alice_id),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "KeyService/CreateApiKey": (
        lambda w: kpb.CreateApiKeyRequest(principal="carol", roles=[kpb.ROLE_PRODUCER]),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "KeyService/ListApiKeys": (
        lambda w: kpb.ListApiKeysRequest(),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": OK},
    ),
    "KeyService/RevokeApiKey": (
        lambda w: kpb.RevokeApiKeyRequest(key="uns_no_such_key"),
        {"alice": PD, "bob": PD, "rita": PD, "oscar": "NOT_FOUND"},
    ),
}


def test_the_role_table_covers_every_rpc() -> None:
    assert set(ROLE_TABLE) == ALL_RPCS


async def test_every_rpc_checks_credentials_and_roles(world: World) -> None:
    """The whole table, plus UNAUTHENTICATED for every RPC without a valid key."""
    mismatches: list[str] = []
    for rpc, (request, expected) in ROLE_TABLE.items():
        for who, want in expected.items():
            got = await world.callers(who).call(rpc, request(world))
            if got.reason != want:
                mismatches.append(f"{rpc} as {who}: expected {want}, got {got}")
            if got.reason == PD:
                assert got.code == grpc.StatusCode.PERMISSION_DENIED
                assert got.error is not None and got.error.metadata["principal"] == who
        for label, authorization in ANONYMOUS.items():
            got = await world.callers.raw(authorization).call(rpc, request(world))
            if (got.reason, got.code) != ("UNAUTHENTICATED", grpc.StatusCode.UNAUTHENTICATED):
                mismatches.append(f"{rpc} with {label}: expected UNAUTHENTICATED, got {got}")
    assert not mismatches, "\n".join(mismatches)


def _shape(outcome: Outcome, notification_id: str) -> tuple[object, ...]:
    """What a caller can observe of a refusal, with the id it asked about blanked out."""
    err = outcome.error
    assert err is not None
    metadata = {k: v.replace(notification_id, "<id>") for k, v in err.metadata.items()}
    return (
        err.code,
        err.reason,
        err.domain,
        err.message.replace(notification_id, "<id>"),
        metadata,
        err.violations,
    )


async def test_an_invisible_id_answers_exactly_like_an_unknown_one(world: World) -> None:
    bob = world.callers("bob")
    random_id = str(uuid.uuid4())
    for asked in (world.alice_id, world.alice_id.upper()):
        foreign = await bob.call(
            "NotificationService/GetNotification", pb.GetNotificationRequest(notification_id=asked)
        )
        unknown = await bob.call(
            "NotificationService/GetNotification",
            pb.GetNotificationRequest(notification_id=random_id),
        )
        assert foreign.reason == "NOT_FOUND"
        assert _shape(foreign, world.alice_id) == _shape(unknown, random_id)
    # Role refusals come before any lookup: an existing id and an unknown one look alike.
    for rpc, request_type in (
        ("NotificationService/Acknowledge", pb.AcknowledgeRequest),
        ("NotificationService/SnoozeNotification", pb.SnoozeNotificationRequest),
        ("NotificationService/Replay", pb.ReplayRequest),
        ("NotificationService/ResolveFailure", pb.ResolveFailureRequest),
        ("AuditService/ListDeliveryAuditRecords", apb.ListDeliveryAuditRecordsRequest),
        ("AuditService/ListAckAuditRecords", apb.ListAckAuditRecordsRequest),
    ):
        existing = await bob.call(rpc, request_type(notification_id=world.alice_id))
        unknown = await bob.call(rpc, request_type(notification_id=UNKNOWN_ID))
        assert existing.reason == PD, rpc
        assert _shape(existing, world.alice_id) == _shape(unknown, UNKNOWN_ID), rpc


async def test_listing_shows_only_the_callers_notifications(world: World) -> None:
    bob = world.callers("bob")
    for text in (
        "",
        "principal = alice",
        'source = "alice-src"',
        f'dedup_owner_id = "{world.alice_id}"',
        "state = PENDING",
    ):
        page = await bob.call(
            "NotificationService/ListNotifications", pb.ListNotificationsRequest(filter=text)
        )
        assert page.reason == OK, (text, page)
        rows = page.response.notifications
        assert {n.principal for n in rows} <= {"bob"}, text
        assert world.alice_id not in {n.id for n in rows}, text
    everything = await world.callers("oscar").call(
        "NotificationService/ListNotifications", pb.ListNotificationsRequest()
    )
    assert {world.alice_id, world.bob_id} <= {n.id for n in everything.response.notifications}


async def test_watching_shows_only_the_callers_events(world: World) -> None:
    bob, alice = world.callers("bob"), world.callers("alice")
    history = await bob.history(pb.WatchEventsRequest(replay_history=True))
    assert history and {e.notification_id for e in history} == {world.bob_id}
    targeted = await bob.history(
        pb.WatchEventsRequest(replay_history=True, notification_ids=[world.alice_id])
    )
    assert targeted == []
    by_type = await bob.history(
        pb.WatchEventsRequest(replay_history=True, notification_type="demo.alert")
    )
    assert {e.notification_id for e in by_type} == {world.bob_id}
    assert {
        e.notification_id
        for e in await world.callers("oscar").history(pb.WatchEventsRequest(replay_history=True))
    } >= {world.alice_id, world.bob_id}

    # Live: alice commits first, then bob. Sequences are allocated in commit order, so if
    # bob could see alice's event it would arrive before his own.
    stream = bob.method("NotificationService/WatchEvents")(
        pb.WatchEventsRequest(), metadata=bob.metadata, timeout=15
    )
    try:
        first = await anext(aiter(stream))
        assert first.HasField("heartbeat")
        alice_sent = await alice.call("NotificationService/SendNotification", send_request())
        bob_sent = await bob.call("NotificationService/SendNotification", send_request())
        async for response in stream:
            if response.HasField("event"):
                assert response.event.notification_id == bob_sent.response.notification_id
                assert response.event.notification_id != alice_sent.response.notification_id
                break
    finally:
        stream.cancel()


async def test_idempotency_and_dedup_scopes_do_not_cross_principals(world: World) -> None:
    """Simulate and Send cannot probe another principal's idempotency or dedup keys."""
    bob = world.callers("bob")
    same_keys = send_request(
        idempotency_key="alice-key", dedup_key="alice-dedup", source="alice-src"
    )
    simulated = await bob.call(
        "NotificationService/Simulate", pb.SimulateRequest(request=same_keys)
    )
    assert simulated.reason == OK
    assert simulated.response.outcome == pb.SIMULATE_OUTCOME_NEW
    assert simulated.response.existing_notification_id == ""
    assert simulated.response.dedup_owner_id == ""
    sent = await bob.call("NotificationService/SendNotification", same_keys)
    assert sent.reason == OK
    assert sent.response.notification_id != world.alice_id
    assert not sent.response.idempotent_replay and sent.response.dedup_owner_id == ""
    # The same request from alice is her idempotent replay: the scope really is per caller.
    again = await world.callers("alice").call("NotificationService/SendNotification", same_keys)
    assert again.response.notification_id == world.alice_id and again.response.idempotent_replay


async def test_a_responder_reads_and_answers_only_for_its_tenants(world: World) -> None:
    """A responder key of principal pat (no responds_for) and one that is also a producer:
    alice's and bob's notifications are NOT_FOUND to both, for reads and acks alike."""
    created = {}
    for name, roles in (
        ("responder", [kpb.ROLE_RESPONDER]),
        ("producer_responder", [kpb.ROLE_PRODUCER, kpb.ROLE_RESPONDER]),
    ):
        reply = await world.callers("oscar").call(
            "KeyService/CreateApiKey", kpb.CreateApiKeyRequest(principal="pat", roles=roles)
        )
        assert reply.reason == OK
        created[name] = world.callers.raw(f"Bearer {reply.response.secret}")
    pat = created["producer_responder"]
    own = await pat.call("NotificationService/SendNotification", send_request())
    assert own.reason == OK
    for caller in created.values():
        for nid in (world.alice_id, world.bob_id):
            get = pb.GetNotificationRequest(notification_id=nid)
            assert (await caller.call("NotificationService/GetNotification", get)).reason == (
                "NOT_FOUND"
            )
            ack = pb.AcknowledgeRequest(notification_id=nid)
            assert (await caller.call("NotificationService/Acknowledge", ack)).reason == (
                "NOT_FOUND"
            )
        mine = await caller.call(
            "NotificationService/GetNotification",
            pb.GetNotificationRequest(notification_id=own.response.notification_id),
        )
        assert mine.reason == OK and mine.response.notification.principal == "pat"
    # rita's tenants come from the key file (alice, bob): pat is not among them.
    rita = world.callers("rita")
    pats = own.response.notification_id
    for rpc, request in (
        ("NotificationService/GetNotification", pb.GetNotificationRequest(notification_id=pats)),
        ("NotificationService/Acknowledge", pb.AcknowledgeRequest(notification_id=pats)),
    ):
        assert (await rita.call(rpc, request)).reason == "NOT_FOUND", rpc
    assert (
        await rita.history(pb.WatchEventsRequest(replay_history=True, notification_ids=[pats]))
        == []
    )
