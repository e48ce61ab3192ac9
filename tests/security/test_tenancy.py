"""Tenancy on every RPC, for every role and every tenant (SPEC §3, issue 20 item 1).

A producer or responder acts only on notifications of its own principal and, for a
responder, of the principals its key ``responds_for``; everything else answers
NOT_FOUND exactly like an unknown id. Only ``operator`` crosses tenants. Listing stays
a producer's own principal (or an operator's everything). No refusal names another
tenant's principal, actor, title or message.

The callers are real stored keys (made through KeyService) of principal ``acme`` (or
``ops`` for the operator); the tenants are ``own`` (acme), ``listed`` (globex: in the
responds_for of the keys that have one) and ``foreign`` (initech). Each cell of the
table is one real gRPC call against a live server, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from tests.security.rpcs import ALL_RPCS, OK, UNKNOWN_ID, Caller, Callers, Outcome
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import audit_service_pb2 as apb
from uns.v1 import key_service_pb2 as kpb
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import types_pb2 as t
from uns_server.services import auth

PD = "PERMISSION_DENIED"
NF = "NOT_FOUND"
SEES = "SEES"  # a Watch/List answer that holds the tenant's notification
EMPTY = "EMPTY"  # a Watch/List answer without it
POLICY_TYPE = "sec.tenancy"

TENANTS = {"own": "acme", "listed": "globex", "foreign": "initech"}
P, R, OP = kpb.ROLE_PRODUCER, kpb.ROLE_RESPONDER, kpb.ROLE_OPERATOR


@dataclass(frozen=True)
class KeySpec:
    principal: str
    roles: tuple[int, ...]
    responds_for: tuple[str, ...] = ()


# The callers of the table: single roles, and keys that hold several.
CALLERS: dict[str, KeySpec] = {
    "producer": KeySpec("acme", (P,)),
    "responder": KeySpec("acme", (R,)),
    "responder_for": KeySpec("acme", (R,), ("globex",)),
    "producer_responder": KeySpec("acme", (P, R), ("globex",)),
    "operator": KeySpec("ops", (OP,)),
    "producer_operator": KeySpec("acme", (P, OP)),
    "responder_operator": KeySpec("ops", (R, OP), ("globex",)),  # operator crosses anyway
}
# Keys that only send the tenants' notifications (not part of the table).
OWNERS = {name: KeySpec(name, (P,)) for name in ("globex", "initech")}


def _row(*cells: str) -> dict[str, str]:
    """One caller's expectations for (own, listed, foreign)."""
    return dict(zip(TENANTS, cells, strict=True))


def _all(cell: str) -> dict[str, str]:
    return _row(cell, cell, cell)


# rpc -> caller -> tenant -> expected outcome. Written out by hand: the table is the spec.
TENANT_TABLE: dict[str, dict[str, dict[str, str]]] = {
    "NotificationService/GetNotification": {
        "producer": _row(OK, NF, NF),
        "responder": _row(OK, NF, NF),
        "responder_for": _row(OK, OK, NF),
        "producer_responder": _row(OK, OK, NF),
        "operator": _all(OK),
        "responder_operator": _all(OK),
        "producer_operator": _all(OK),
    },
    "NotificationService/Acknowledge": {
        "producer": _all(PD),
        "responder": _row(OK, NF, NF),
        "responder_for": _row(OK, OK, NF),
        "producer_responder": _row(OK, OK, NF),
        "operator": _all(OK),
        "responder_operator": _all(OK),
        "producer_operator": _all(OK),
    },
    "NotificationService/SnoozeNotification": {  # whoever may answer may snooze
        "producer": _all(PD),
        "responder": _row(OK, NF, NF),
        "responder_for": _row(OK, OK, NF),
        "producer_responder": _row(OK, OK, NF),
        "operator": _all(OK),
        "responder_operator": _all(OK),
        "producer_operator": _all(OK),
    },
    "NotificationService/WatchEvents": {  # replayed history, filtered on the tenant's id
        "producer": _row(SEES, EMPTY, EMPTY),
        "responder": _row(SEES, EMPTY, EMPTY),
        "responder_for": _row(SEES, SEES, EMPTY),
        "producer_responder": _row(SEES, SEES, EMPTY),
        "operator": _all(SEES),
        "responder_operator": _all(SEES),
        "producer_operator": _all(SEES),
    },
    "NotificationService/ListNotifications": {  # filtered on the tenant's principal
        "producer": _row(SEES, EMPTY, EMPTY),
        "responder": _all(PD),
        "responder_for": _all(PD),
        "producer_responder": _row(SEES, EMPTY, EMPTY),  # listing stays producer-own
        "operator": _all(SEES),
        "responder_operator": _all(SEES),
        "producer_operator": _all(SEES),
    },
    "NotificationService/Replay": {
        **{who: _all(PD) for who in ("producer", "responder", "responder_for")},
        "producer_responder": _all(PD),
        "operator": _all("NOT_DEAD_LETTERED"),
        "responder_operator": _all("NOT_DEAD_LETTERED"),
        "producer_operator": _all("NOT_DEAD_LETTERED"),
    },
    "NotificationService/ResolveFailure": {
        **{who: _all(PD) for who in ("producer", "responder", "responder_for")},
        "producer_responder": _all(PD),
        "operator": _all("NOT_DEAD_LETTERED"),
        "responder_operator": _all("NOT_DEAD_LETTERED"),
        "producer_operator": _all("NOT_DEAD_LETTERED"),
    },
    "NotificationService/WithdrawNotification": {  # the owning producer, or an operator
        "producer": _row(OK, NF, NF),
        "responder": _all(PD),
        "responder_for": _all(PD),
        "producer_responder": _row(OK, NF, NF),  # responds_for does not widen withdrawal
        "operator": _all(OK),
        "responder_operator": _all(OK),
        "producer_operator": _all(OK),
    },
    "AuditService/ListDeliveryAuditRecords": {
        **{who: _all(PD) for who in ("producer", "responder", "responder_for")},
        "producer_responder": _all(PD),
        "operator": _all(OK),
        "responder_operator": _all(OK),
        "producer_operator": _all(OK),
    },
    "AuditService/ListAckAuditRecords": {
        **{who: _all(PD) for who in ("producer", "responder", "responder_for")},
        "producer_responder": _all(PD),
        "operator": _all(OK),
        "responder_operator": _all(OK),
        "producer_operator": _all(OK),
    },
}

# RPCs with no notification to be in a tenant of: rpc -> (request, caller -> outcome).
# A send is always in the caller's own tenant.
Request = Callable[[], Message]
_OPERATOR_ONLY = {
    "producer": PD,
    "responder": PD,
    "responder_for": PD,
    "producer_responder": PD,
    "operator": OK,
    "responder_operator": OK,
    "producer_operator": OK,
}
_SENDERS = {
    "producer": OK,
    "responder": PD,
    "responder_for": PD,
    "producer_responder": OK,
    "operator": PD,
    "responder_operator": PD,
    "producer_operator": OK,
}
UNTENANTED_TABLE: dict[str, tuple[Request, dict[str, str]]] = {
    "NotificationService/SendNotification": (lambda: send_request(), _SENDERS),
    "NotificationService/Simulate": (
        lambda: pb.SimulateRequest(request=send_request()),
        _SENDERS,
    ),
    "NotificationService/BatchSendNotifications": (
        lambda: pb.BatchSendNotificationsRequest(requests=[send_request()]),
        _SENDERS,
    ),
    "PolicyService/PutPolicyRevision": (
        lambda: ppb.PutPolicyRevisionRequest(
            notification_type=POLICY_TYPE,
            spec=ppb.PolicySpec(channels=["log"], delivery_mode=t.DELIVERY_MODE_GUARANTEED),
        ),
        _OPERATOR_ONLY,
    ),
    "PolicyService/ActivatePolicyRevision": (
        lambda: ppb.ActivatePolicyRevisionRequest(notification_type=POLICY_TYPE, revision=1),
        _OPERATOR_ONLY,
    ),
    "PolicyService/GetPolicy": (
        lambda: ppb.GetPolicyRequest(notification_type=POLICY_TYPE, revision=1),
        _OPERATOR_ONLY,
    ),
    "PolicyService/ListPolicyRevisions": (
        lambda: ppb.ListPolicyRevisionsRequest(notification_type=POLICY_TYPE),
        _OPERATOR_ONLY,
    ),
    "KeyService/CreateApiKey": (
        lambda: kpb.CreateApiKeyRequest(
            principal="umbrella", roles=[R], responds_for=["globex", "initech"]
        ),
        _OPERATOR_ONLY,
    ),
    "KeyService/ListApiKeys": (lambda: kpb.ListApiKeysRequest(), _OPERATOR_ONLY),
    "KeyService/RevokeApiKey": (
        lambda: kpb.RevokeApiKeyRequest(key="uns_no_such"),
        {**_OPERATOR_ONLY, "operator": NF, "producer_operator": NF, "responder_operator": NF},
    ),
}


def test_the_tables_cover_every_rpc_caller_and_tenant() -> None:
    assert set(TENANT_TABLE) | set(UNTENANTED_TABLE) == ALL_RPCS
    assert not set(TENANT_TABLE) & set(UNTENANTED_TABLE)
    for rpc, by_caller in TENANT_TABLE.items():
        assert set(by_caller) == set(CALLERS), rpc
        assert all(set(cells) == set(TENANTS) for cells in by_caller.values()), rpc
    for rpc, (_, by_caller) in UNTENANTED_TABLE.items():
        assert set(by_caller) == set(CALLERS), rpc


@dataclass
class Tenant:
    principal: str
    secrets: tuple[str, ...]  # what no refusal to an outsider may contain
    notification_id: str = ""


@dataclass
class World:
    server: RunningServer
    callers: Callers
    keys: dict[str, Caller]  # CALLERS and OWNERS by name
    tenants: dict[str, Tenant] = field(default_factory=dict)  # by TENANTS label

    async def send(self, tenant: str, **fields: object) -> str:
        """A delivered notification of ``tenant`` whose acknowledgement is PENDING."""
        info = self.tenants[tenant]
        owner = self.keys["producer" if tenant == "own" else info.principal]
        sent = await owner.call(
            "NotificationService/SendNotification",
            send_request(
                title=f"title-of-{info.principal}-{uuid.uuid4().hex[:8]}",
                message=f"message-of-{info.principal}",
                source=f"source-of-{info.principal}",
                require_ack=True,
                wait_for_first_attempt=True,
                **fields,
            ),
        )
        assert sent.reason == OK, sent
        assert sent.response.state == t.NOTIFICATION_STATE_DELIVERED, sent
        return str(sent.response.notification_id)

    async def notification(self, notification_id: str) -> t.Notification:
        got = await self.keys["operator"].call(
            "NotificationService/GetNotification",
            pb.GetNotificationRequest(notification_id=notification_id),
        )
        assert got.reason == OK, got
        return got.response.notification  # type: ignore[no-any-return]


async def create_key(callers: Callers, spec: KeySpec) -> Caller:
    created = await callers("oscar").call(
        "KeyService/CreateApiKey",
        kpb.CreateApiKeyRequest(
            principal=spec.principal, roles=list(spec.roles), responds_for=list(spec.responds_for)
        ),
    )
    assert created.reason == OK, created
    assert list(created.response.api_key.responds_for) == sorted(spec.responds_for)
    return callers.raw(f"Bearer {created.response.secret}")


@pytest.fixture
async def world(db_url: str, tmp_path: Path) -> AsyncIterator[World]:
    server = await start_server(db_url, tmp_path)
    try:
        callers = Callers(server)
        keys = {
            name: await create_key(callers, spec) for name, spec in {**CALLERS, **OWNERS}.items()
        }
        w = World(server, callers, keys)
        for label, principal in TENANTS.items():
            w.tenants[label] = Tenant(
                principal,
                (principal, f"title-of-{principal}", f"message-of-{principal}"),
            )
        for label in TENANTS:
            w.tenants[label].notification_id = await w.send(label)
        yield w
    finally:
        await server.stop()


def _visible_tenants(who: str) -> set[str]:
    """The tenant labels ``who`` may read (the Get row of the table)."""
    row = TENANT_TABLE["NotificationService/GetNotification"][who]
    return {label for label, cell in row.items() if cell == OK}


def _tenant_request(rpc: str, notification_id: str, principal: str) -> Message:
    requests: dict[str, Message] = {
        "NotificationService/GetNotification": pb.GetNotificationRequest(
            notification_id=notification_id
        ),
        "NotificationService/Acknowledge": pb.AcknowledgeRequest(notification_id=notification_id),
        "NotificationService/SnoozeNotification": pb.SnoozeNotificationRequest(
            notification_id=notification_id, duration=Duration(seconds=600)
        ),
        "NotificationService/WatchEvents": pb.WatchEventsRequest(
            replay_history=True, notification_ids=[notification_id]
        ),
        "NotificationService/ListNotifications": pb.ListNotificationsRequest(
            filter=f'principal = "{principal}"'
        ),
        "NotificationService/Replay": pb.ReplayRequest(notification_id=notification_id),
        "NotificationService/ResolveFailure": pb.ResolveFailureRequest(
            notification_id=notification_id
        ),
        "NotificationService/WithdrawNotification": pb.WithdrawNotificationRequest(
            notification_id=notification_id, reason="cleared"
        ),
        "AuditService/ListDeliveryAuditRecords": apb.ListDeliveryAuditRecordsRequest(
            notification_id=notification_id
        ),
        "AuditService/ListAckAuditRecords": apb.ListAckAuditRecordsRequest(
            notification_id=notification_id
        ),
    }
    return requests[rpc]


async def _observe(w: World, who: str, rpc: str, tenant: str) -> tuple[str, str]:
    """(the cell's outcome, the refusal's full text or "")."""
    info = w.tenants[tenant]
    nid = info.notification_id
    if rpc in (
        "NotificationService/Acknowledge",
        "NotificationService/SnoozeNotification",
        "NotificationService/WithdrawNotification",
    ):
        nid = await w.send(tenant)  # a fresh PENDING ack for every cell
    caller = w.keys[who]
    request = _tenant_request(rpc, nid, info.principal)
    outcome = await caller.call(rpc, request)
    if outcome.reason != OK:
        return outcome.reason, outcome.exposed
    if rpc == "NotificationService/WatchEvents":
        assert isinstance(request, pb.WatchEventsRequest)
        events = await caller.history(request)
        assert {e.notification_id for e in events} <= {nid}
        return (SEES if events else EMPTY), ""
    if rpc == "NotificationService/ListNotifications" and outcome.reason == OK:
        rows = outcome.response.notifications
        assert {n.principal for n in rows} <= {info.principal}
        return (SEES if nid in {n.id for n in rows} else EMPTY), ""
    if rpc == "NotificationService/Acknowledge":
        after = await w.notification(nid)
        if outcome.reason == OK:
            assert after.ack_state == t.ACK_STATE_ACKED
            assert after.ack_actor == CALLERS[who].principal
            assert outcome.response.notification.id == nid
        else:  # a refusal changed nothing
            assert after.ack_state == t.ACK_STATE_PENDING and after.ack_actor == ""
    if rpc == "NotificationService/SnoozeNotification":
        after = await w.notification(nid)
        if outcome.reason == OK:
            assert after.ack_state == t.ACK_STATE_SNOOZED
        else:  # a refusal changed nothing
            assert after.ack_state == t.ACK_STATE_PENDING
    if rpc == "NotificationService/WithdrawNotification":
        after = await w.notification(nid)
        if outcome.reason == OK:
            assert after.ack_state == t.ACK_STATE_WITHDRAWN
            assert after.withdraw_actor == CALLERS[who].principal
        else:  # a refusal changed nothing
            assert after.ack_state == t.ACK_STATE_PENDING and after.withdraw_actor == ""
    return outcome.reason, ""


async def test_every_rpc_role_and_tenant(world: World) -> None:
    mismatches: list[str] = []
    leaks: list[str] = []
    for rpc, by_caller in TENANT_TABLE.items():
        for who, cells in by_caller.items():
            hidden = [
                world.tenants[label] for label in TENANTS if label not in _visible_tenants(who)
            ]
            for tenant, want in cells.items():
                got, text = await _observe(world, who, rpc, tenant)
                if got != want:
                    mismatches.append(f"{rpc} as {who} on {tenant}: expected {want}, got {got}")
                for info in hidden:
                    leaks += [
                        f"{rpc} as {who} on {tenant}: refusal contains {s!r}: {text!r}"
                        for s in info.secrets
                        if s in text
                    ]
    for rpc, (request, expected) in UNTENANTED_TABLE.items():
        for who, want in expected.items():
            got = await world.keys[who].call(rpc, request())
            if got.reason != want:
                mismatches.append(f"{rpc} as {who}: expected {want}, got {got}")
    assert not mismatches, "\n".join(mismatches)
    assert not leaks, "\n".join(leaks)


async def test_an_id_outside_the_tenants_answers_exactly_like_an_unknown_id(world: World) -> None:
    """Same code, reason, message and ErrorInfo: existence never leaks, for reads and
    for acknowledgements, to responders as to producers."""

    def shape(outcome: Outcome, nid: str) -> tuple[object, ...]:
        err = outcome.error
        assert err is not None, outcome
        return (
            err.code,
            err.reason,
            err.message.replace(nid, "<id>"),
            {k: v.replace(nid, "<id>") for k, v in err.metadata.items()},
        )

    foreign = world.tenants["foreign"].notification_id
    for who in ("producer", "responder", "responder_for", "producer_responder"):
        caller = world.keys[who]
        for rpc, make in (
            ("NotificationService/GetNotification", pb.GetNotificationRequest),
            ("NotificationService/Acknowledge", pb.AcknowledgeRequest),
        ):
            seen = await caller.call(rpc, make(notification_id=foreign))
            unknown = await caller.call(rpc, make(notification_id=UNKNOWN_ID))
            if seen.reason == PD:  # a producer may not acknowledge at all
                assert unknown.reason == PD, (rpc, who)
                continue
            assert seen.reason == NF, (rpc, who, seen)
            assert shape(seen, foreign) == shape(unknown, UNKNOWN_ID), (rpc, who)
        # Acknowledge refuses exactly what GetNotification refuses (it used to answer
        # with the whole notification).
        dismissed = await caller.call(
            "NotificationService/Acknowledge",
            pb.AcknowledgeRequest(notification_id=foreign, dismiss=True),
        )
        assert dismissed.reason in (NF, PD) and dismissed.response is None
    after = await world.notification(foreign)
    assert after.ack_state == t.ACK_STATE_PENDING


async def test_live_streams_carry_only_the_callers_tenants(world: World) -> None:
    """The hub's fan-out (not only the catch-up query): streams opened before the sends
    receive exactly their tenants' events; filters narrow, never widen."""
    streams = {}
    try:
        for who in CALLERS:
            caller = world.keys[who]
            stream = caller.method("NotificationService/WatchEvents")(
                # Asking for every tenant's type and kind widens nothing.
                pb.WatchEventsRequest(kinds=[t.EVENT_KIND_ACCEPTED]),
                metadata=caller.metadata,
                timeout=30,
            )
            first = await anext(aiter(stream))
            assert first.HasField("heartbeat")
            streams[who] = stream
        # Foreign first, own last: every caller sees "own", and sequences follow commit
        # order, so anything else it could see arrives before it.
        sent = {label: await world.send(label) for label in ("foreign", "listed", "own")}
        for who, stream in streams.items():
            seen: set[str] = set()
            async for response in stream:
                if response.HasField("event"):
                    assert response.event.kind == t.EVENT_KIND_ACCEPTED
                    seen.add(response.event.notification_id)
                    if response.event.notification_id == sent["own"]:
                        break
            expected = {sent[label] for label in _visible_tenants(who)}
            assert seen == expected, who
    finally:
        for stream in streams.values():
            stream.cancel()


async def test_unfiltered_history_holds_only_the_callers_tenants(world: World) -> None:
    for who in CALLERS:
        events = await world.keys[who].history(pb.WatchEventsRequest(replay_history=True))
        ids = {e.notification_id for e in events}
        expected = {world.tenants[label].notification_id for label in _visible_tenants(who)}
        assert ids == expected, who


async def test_ack_conflicts_name_only_actors_the_caller_may_see(world: World) -> None:
    """An ACK_CONFLICT names who settled the acknowledgement only to that actor itself,
    to callers whose tenants include the actor's principal, and to operators; anyone
    else reads "another actor", with no actor in ErrorInfo."""
    umbrella = await create_key(world.callers, KeySpec("umbrella", (R,), ("globex",)))
    globex_responder = await create_key(world.callers, KeySpec("globex", (R,)))
    nid = await world.send("listed")  # a globex notification
    acked = await umbrella.call(
        "NotificationService/Acknowledge", pb.AcknowledgeRequest(notification_id=nid)
    )
    assert acked.reason == OK and acked.response.notification.ack_actor == "umbrella"
    dismiss = pb.AcknowledgeRequest(notification_id=nid, dismiss=True)

    for caller, named in (
        (world.keys["responder_for"], False),  # acme, for globex: umbrella is not its tenant
        (world.keys["producer_responder"], False),
        (globex_responder, False),  # the notification's own principal
        (world.keys["operator"], True),
        (umbrella, True),  # the actor itself, settling differently
    ):
        outcome = await caller.call("NotificationService/Acknowledge", dismiss)
        text = outcome.exposed
        assert outcome.reason == "ACK_CONFLICT" and outcome.code == grpc.StatusCode.ABORTED
        assert outcome.error is not None
        if named:
            assert "umbrella" in outcome.error.message or "by you" in outcome.error.message
            assert outcome.error.metadata["actor"] == "umbrella"
        else:
            assert "umbrella" not in text, text
            assert "another actor" in outcome.error.message
            assert "actor" not in outcome.error.metadata
        assert outcome.error.metadata["ack_state"] == "ACKED"
    # A responder for umbrella's tenant may be told: umbrella is one of its principals.
    umbrella_watcher = await create_key(
        world.callers, KeySpec("acme", (R,), ("globex", "umbrella"))
    )
    outcome = await umbrella_watcher.call("NotificationService/Acknowledge", dismiss)
    assert outcome.reason == "ACK_CONFLICT" and outcome.error is not None
    assert outcome.error.metadata["actor"] == "umbrella"
    # Nothing was changed by any of the refusals.
    after = await world.notification(nid)
    assert (after.ack_state, after.ack_actor) == (t.ACK_STATE_ACKED, "umbrella")


async def test_responds_for_is_stored_listed_and_checked(world: World) -> None:
    oscar = world.callers("oscar")
    created = await oscar.call(
        "KeyService/CreateApiKey",
        kpb.CreateApiKeyRequest(principal="acme", roles=[P, R], responds_for=["globex"]),
    )
    plain = await oscar.call(
        "KeyService/CreateApiKey", kpb.CreateApiKeyRequest(principal="acme", roles=[R])
    )
    listed = await oscar.call("KeyService/ListApiKeys", kpb.ListApiKeysRequest(page_size=1000))
    assert OK == created.reason == plain.reason == listed.reason
    by_id = {k.id: list(k.responds_for) for k in listed.response.api_keys}
    assert by_id[created.response.api_key.id] == ["globex"]
    assert by_id[plain.response.api_key.id] == []

    # Repeats and the key's own principal count once; names are sorted.
    created = await oscar.call(
        "KeyService/CreateApiKey",
        kpb.CreateApiKeyRequest(
            principal="acme", roles=[R], responds_for=["initech", " globex", "acme", "initech"]
        ),
    )
    assert created.reason == OK
    assert list(created.response.api_key.responds_for) == ["globex", "initech"]

    for request, field_name in (
        (kpb.CreateApiKeyRequest(principal="x", roles=[P], responds_for=["y"]), "responds_for"),
        (kpb.CreateApiKeyRequest(principal="x", roles=[OP], responds_for=["y"]), "responds_for"),
        (kpb.CreateApiKeyRequest(principal="x", roles=[R], responds_for=[""]), "responds_for[0]"),
        (
            kpb.CreateApiKeyRequest(principal="x", roles=[R], responds_for=["a", "b\x00"]),
            "responds_for[1]",
        ),
        (
            kpb.CreateApiKeyRequest(principal="x", roles=[R], responds_for=["a" * 256]),
            "responds_for[0]",
        ),
        (
            kpb.CreateApiKeyRequest(
                principal="x", roles=[R], responds_for=[f"p{i}" for i in range(101)]
            ),
            "responds_for",
        ),
    ):
        refused = await oscar.call("KeyService/CreateApiKey", request)
        assert refused.reason == "INVALID_REQUEST", request
        assert refused.error is not None and field_name in refused.error.violations, refused


def test_the_key_file_carries_responds_for(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(
        "- {key: uns_a, principal: acme, roles: [responder], responds_for: [globex, initech]}\n"
        "- {key: uns_b, principal: acme, roles: [responder], responds_for: 'globex, initech'}\n"
        "- {key: uns_c, principal: acme, roles: [producer]}\n"
    )
    keys = auth.load_key_file(str(path)).keys
    a, b, c = (keys[auth.hash_key(k)] for k in ("uns_a", "uns_b", "uns_c"))
    assert a.responds_for == b.responds_for == frozenset({"globex", "initech"})
    assert a.tenants == frozenset({"acme", "globex", "initech"})
    assert c.tenants == frozenset({"acme"})
    path.write_text("- {key: uns_d, principal: acme, roles: [producer], responds_for: [globex]}\n")
    with pytest.raises(ValueError, match="responds_for, which needs the responder role"):
        auth.load_key_file(str(path))
    path.write_text("- {key: uns_e, principal: acme, roles: [responder], responds_for: 5}\n")
    with pytest.raises(ValueError, match="responds_for must be a list"):
        auth.load_key_file(str(path))
