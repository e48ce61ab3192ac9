"""Property-based fuzzing of every RPC against a real in-process server (issue 8 item 4).

Hypothesis generates arbitrary and adversarial requests — random, oversized, unicode and
NUL strings, unknown enum numbers, deep and huge Struct metadata, random ids, filters
and page tokens (including well-formed tokens with hostile contents), negative and
extreme cursors, random credentials, and raw bytes that are not protobuf at all — and
checks, for every answer:

- never INTERNAL, UNKNOWN or UNAVAILABLE (the database is healthy: UNAVAILABLE would
  misclassify a bad request as retryable), and no call hangs;
- every refusal carries exactly one ErrorInfo in domain ``uns.v1`` whose reason is
  documented, with the code the SPEC gives that reason (the one exception: grpc's own
  RESOURCE_EXHAUSTED for a request above ``max_receive_message_bytes``);
- a refused request leaves no partial write, and read-only RPCs never write (row
  counts of every written table are unchanged).

One server (SQLite, dispatch stepped by hand so nothing writes in the background) serves
the whole module. It is seeded with notifications in every interesting state: pending,
delivered with a pending acknowledgement, dead-lettered, dedup followers, another
principal's. ``test_adversarial_corpus`` replays the nastiest fixed inputs on both
dialects (PostgreSQL refuses NUL bytes and out-of-range timestamps that SQLite accepts).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.rpcs import (
    ALL_RPCS,
    OK,
    SPEC_REASONS,
    UNKNOWN_ID,
    Caller,
    Callers,
    row_counts,
)
from tests.support.grpc_errors import rich_error, rich_status
from tests.support.http_receiver import unused_tcp_port
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import audit_service_pb2 as apb
from uns.v1 import key_service_pb2 as kpb
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.settings import MAX_RECEIVE_MESSAGE_BYTES_DEFAULT
from uns_server.store import migrate
from uns_server.store.db import Database

EXAMPLES = 100
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
    ],
)
RPC_SECONDS = 10.0
# Calls that change state when they succeed; everything else must never write.
WRITING_RPCS = frozenset(
    {
        "NotificationService/SendNotification",
        "NotificationService/BatchSendNotifications",
        "NotificationService/Acknowledge",
        "NotificationService/SnoozeNotification",
        "NotificationService/Replay",
        "NotificationService/ResolveFailure",
        "NotificationService/WithdrawNotification",
        "PolicyService/PutPolicyRevision",
        "PolicyService/ActivatePolicyRevision",
    }
)
# Who passes the role check of each RPC (the role table is test_isolation's job).
ROLE_OF = {
    "NotificationService/SendNotification": "alice",
    "NotificationService/BatchSendNotifications": "alice",
    "NotificationService/Simulate": "alice",
    "NotificationService/GetNotification": "alice",
    "NotificationService/ListNotifications": "alice",
    "NotificationService/WatchEvents": "alice",
    "NotificationService/Acknowledge": "rita",
    "NotificationService/SnoozeNotification": "rita",
    "NotificationService/Replay": "oscar",
    "NotificationService/ResolveFailure": "oscar",
    "NotificationService/WithdrawNotification": "alice",
    "PolicyService/PutPolicyRevision": "oscar",
    "PolicyService/ActivatePolicyRevision": "oscar",
    "PolicyService/GetPolicy": "oscar",
    "PolicyService/ListPolicyRevisions": "oscar",
    "AuditService/ListDeliveryAuditRecords": "oscar",
    "AuditService/ListAckAuditRecords": "oscar",
    "KeyService/CreateApiKey": "oscar",
    "KeyService/ListApiKeys": "oscar",
    "KeyService/RevokeApiKey": "oscar",
}
REQUEST_TYPES: dict[str, type[Message]] = {
    "NotificationService/SendNotification": pb.SendNotificationRequest,
    "NotificationService/BatchSendNotifications": pb.BatchSendNotificationsRequest,
    "NotificationService/Simulate": pb.SimulateRequest,
    "NotificationService/GetNotification": pb.GetNotificationRequest,
    "NotificationService/ListNotifications": pb.ListNotificationsRequest,
    "NotificationService/WatchEvents": pb.WatchEventsRequest,
    "NotificationService/Acknowledge": pb.AcknowledgeRequest,
    "NotificationService/SnoozeNotification": pb.SnoozeNotificationRequest,
    "NotificationService/Replay": pb.ReplayRequest,
    "NotificationService/ResolveFailure": pb.ResolveFailureRequest,
    "NotificationService/WithdrawNotification": pb.WithdrawNotificationRequest,
    "PolicyService/PutPolicyRevision": ppb.PutPolicyRevisionRequest,
    "PolicyService/ActivatePolicyRevision": ppb.ActivatePolicyRevisionRequest,
    "PolicyService/GetPolicy": ppb.GetPolicyRequest,
    "PolicyService/ListPolicyRevisions": ppb.ListPolicyRevisionsRequest,
    "AuditService/ListDeliveryAuditRecords": apb.ListDeliveryAuditRecordsRequest,
    "AuditService/ListAckAuditRecords": apb.ListAckAuditRecordsRequest,
    "KeyService/CreateApiKey": kpb.CreateApiKeyRequest,
    "KeyService/ListApiKeys": kpb.ListApiKeysRequest,
    "KeyService/RevokeApiKey": kpb.RevokeApiKeyRequest,
}


def test_the_fuzz_tables_cover_every_rpc() -> None:
    assert set(ROLE_OF) == set(REQUEST_TYPES) == ALL_RPCS


# --- the property --------------------------------------------------------------------


async def check(server: RunningServer, caller: Caller, rpc: str, request: Message) -> str:
    """Call once and check the properties; returns "OK" or the ErrorInfo reason."""
    before = await row_counts(server)
    answer = await answer_of(caller, rpc, request)
    after = await row_counts(server)
    if isinstance(answer, grpc.aio.AioRpcError):
        code = answer.code()
        size = len(request.SerializeToString())
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and size > MAX_RECEIVE_MESSAGE_BYTES_DEFAULT:
            reason = "TRANSPORT_LIMIT"  # grpc's own refusal: the service never ran
        else:
            assert code not in (
                grpc.StatusCode.INTERNAL,
                grpc.StatusCode.UNKNOWN,
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            ), f"{rpc}: {code.name} {answer.details()!r}"
            err = rich_error(answer)  # exactly one ErrorInfo
            assert err.domain == "uns.v1", err
            assert err.reason in SPEC_REASONS, f"{rpc}: undocumented reason {err.reason}"
            assert code == SPEC_REASONS[err.reason], f"{rpc}: {err.reason} with {code.name}"
            if err.reason == "INVALID_REQUEST":
                assert err.violations, f"{rpc}: INVALID_REQUEST without BadRequest"
            reason = err.reason
        assert after == before, f"{rpc} refused with {reason} but wrote: {before} -> {after}"
        return reason
    if rpc not in WRITING_RPCS:
        assert after == before, f"read-only {rpc} wrote: {before} -> {after}"
    if isinstance(answer, pb.BatchSendNotificationsResponse):
        assert len(answer.results) == len(request.requests)  # type: ignore[attr-defined]
        for item in answer.results:
            if item.WhichOneof("result") == "error":
                err = rich_status(item.error)
                assert err.domain == "uns.v1", err
                assert err.reason in SPEC_REASONS, f"{rpc}: undocumented reason {err.reason}"
                assert err.code == SPEC_REASONS[err.reason], f"{rpc}: {err.reason} {err.code}"
                assert err.code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), err
    return OK


async def answer_of(caller: Caller, rpc: str, request: Message) -> Any:
    """The response (a stream's first message) or the AioRpcError."""
    method = caller.method(rpc)
    try:
        if rpc == "NotificationService/WatchEvents":
            stream = method(request, metadata=caller.metadata, timeout=RPC_SECONDS)
            try:
                async for response in stream:
                    return response
                raise AssertionError("WatchEvents ended without a message")
            finally:
                stream.cancel()
        return await method(request, metadata=caller.metadata, timeout=RPC_SECONDS)
    except grpc.aio.AioRpcError as err:
        return err


# --- the server ----------------------------------------------------------------------


@dataclass
class Fuzz:
    server: RunningServer
    callers: Callers
    ids: list[str] = field(default_factory=list)  # seeded notifications, every state
    tokens: list[str] = field(default_factory=list)  # real page tokens

    def caller(self, rpc: str) -> Caller:
        return self.callers(ROLE_OF[rpc])


@pytest.fixture(scope="module")
async def fuzz(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fuzz]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite+aiosqlite:///{tmp / 'uns.db'}"
    db = Database(url)
    await migrate.upgrade(db)
    await db.dispose()
    server = await seeded_server(url, tmp)
    try:
        callers = Callers(server)
        world = Fuzz(server, callers)
        await seed(world)
        yield world
    finally:
        await server.stop()


async def seeded_server(url: str, tmp: Path) -> RunningServer:
    channels = tmp / "channels.json"
    channels.write_text(
        json.dumps(
            {
                "broken": {  # nothing listens: every attempt fails at once
                    "type": "webhook",
                    "url": f"http://127.0.0.1:{unused_tcp_port()}/hook",
                    "secret": "fuzz-secret",
                    "timeout_seconds": 1,
                }
            }
        )
    )
    await activate_policy(
        url,
        "fuzz.ack",
        channels=["log"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
    )
    await activate_policy(
        url,
        "fuzz.dead",
        channels=["broken"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        max_attempts=1,
    )
    return await start_server(url, tmp, dispatch_enabled=False, channels_file=str(channels))


async def seed(world: Fuzz) -> None:
    alice, bob = world.callers("alice"), world.callers("bob")
    send = "NotificationService/SendNotification"
    requests = [
        (alice, send_request(notification_type="fuzz.ack", idempotency_key=f"ack{i}"))
        for i in range(4)
    ]
    requests += [
        (alice, send_request(notification_type="fuzz.dead", idempotency_key=f"dead{i}"))
        for i in range(4)
    ]
    requests += [
        (alice, send_request(dedup_key="storm", idempotency_key=f"s{i}")) for i in range(3)
    ]
    requests += [(bob, send_request(idempotency_key="k", source="bob-src"))]
    for caller, request in requests:
        outcome = await caller.call(send, request)
        assert outcome.reason == OK, outcome
        world.ids.append(outcome.response.notification_id)
    dispatcher = world.server.app.dispatcher
    while (await dispatcher.run_once()).claimed:
        pass
    page = await world.callers("oscar").call(
        "NotificationService/ListNotifications", pb.ListNotificationsRequest(page_size=2)
    )
    world.tokens.append(page.response.next_page_token)
    policies = await world.callers("oscar").call(
        "PolicyService/ListPolicyRevisions",
        ppb.ListPolicyRevisionsRequest(notification_type="fuzz.ack", page_size=1),
    )
    world.tokens.append(policies.response.next_page_token)


# --- strategies ----------------------------------------------------------------------

NASTY_STRINGS = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\t\n\r",
    "\u202e\u200b\ufeff",  # bidi override, zero-width space, BOM
    "\U0001f4a9" * 300,
    "'; DROP TABLE uns_notifications; --",
    '" OR 1=1 --',
    "%_\\",
    "$(reboot)`id`",
    "../../etc/passwd",
    "${jndi:ldap://x}",
    "\uffff\ufffe",
    "e\u0301" * 200,  # combining marks
    "x" * 256,
    "x" * 16385,
    "é" * 255,
]
T = TypeVar("T")


def mostly(valid: st.SearchStrategy[T], hostile: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """``valid`` three times in four, so requests get past validation and reach the
    deeper paths (lookups, state checks, writes) as often as they are refused early."""
    return st.integers(0, 3).flatmap(lambda i: hostile if i == 0 else valid)


text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(NASTY_STRINGS),
    st.text(min_size=250, max_size=260),
    st.integers(0, 40_000).map(lambda n: "y" * n),
)
name_like = st.from_regex(r"[A-Za-z0-9._:-]{1,40}", fullmatch=True)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
page_size = mostly(st.integers(0, 1000), st.one_of(st.integers(-2, 1002), int32))


def enum_number(values: list[int]) -> st.SearchStrategy[Any]:
    """A known value or any int32 (typed Any: each generated enum has its own type)."""
    return st.one_of(st.sampled_from(values), int32)


INTENTS: list[Any] = [int(v) for v in t.NotificationIntent.values()]
MODES: list[Any] = [int(v) for v in t.DeliveryMode.values()]
PRIORITIES: list[Any] = [int(v) for v in t.Priority.values()]
AUTONOMY: list[Any] = [int(v) for v in t.AutonomyMode.values()]
KINDS: list[Any] = [int(v) for v in t.EventKind.values()]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),  # NaN and infinities included
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(NASTY_STRINGS[:8]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)


def chain(depth: int) -> dict[str, Any]:
    value: Any = 1.0
    for _ in range(depth - 1):
        value = {"d": value}
    return {"d": value}


small_metadata = st.dictionaries(st.text(max_size=10), json_value, max_size=6)
metadata = st.one_of(
    small_metadata,
    st.integers(1, 45).map(chain),  # past 33 levels protobuf itself cannot decode it
    st.integers(16_370, 16_400).map(lambda n: {"k": "z" * n}),  # around 16 KiB
    st.sampled_from(["slack_channel", "email_to", "pagerduty_severity", "websocket_user_id"]).map(
        lambda k: {k: "x"}
    ),
)


def token_of(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


zones = st.sampled_from([None, UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-14))])
iso_times = st.datetimes(timezones=zones).map(lambda d: d.isoformat())


def page_tokens(world: Fuzz) -> st.SearchStrategy[str]:
    return st.one_of(
        text,
        st.sampled_from(world.tokens),
        st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode()),
        st.lists(json_value, max_size=4).map(token_of),
        st.tuples(iso_times, st.one_of(st.text(max_size=5), int64), text).map(
            lambda v: token_of(list(v))
        ),
        st.tuples(st.integers(0, 2), name_like, st.one_of(int64, st.floats())).map(
            lambda v: token_of(list(v))
        ),
        st.tuples(ids(world), st.one_of(int64, st.floats(), st.text(max_size=3))).map(
            lambda v: token_of(list(v))
        ),
    )


def ids(world: Fuzz) -> st.SearchStrategy[str]:
    return mostly(
        st.sampled_from([*world.ids, UNKNOWN_ID]),
        st.one_of(
            st.sampled_from(world.ids).map(str.upper),
            st.uuids().map(str),
            st.uuids().map(lambda u: u.hex),  # no hyphens
            text,
        ),
    )


SEND_FIELDS = [
    "notification_type",
    "intent",
    "title",
    "message",
    "source",
    "idempotency_key",
    "dedup_key",
    "correlation_id",
    "autonomy_context",
    "metadata",
    "delivery_mode",
    "require_ack",
    "priority",
]


@st.composite
def send_fields(draw: st.DrawFn) -> dict[str, Any]:
    """A valid request with up to four fields replaced by arbitrary values, so requests
    reach every stage (validation, policy, idempotency, dedup, the write)."""
    values: dict[str, Any] = {
        "notification_type": draw(st.sampled_from(["demo.alert", "fuzz.ack", "fuzz.dead"])),
        "intent": draw(st.sampled_from(INTENTS[1:])),
        "title": draw(st.text(min_size=1, max_size=10).filter(str.strip)),
        "message": "m",
        "source": draw(st.sampled_from(["src-a", "src-b"])),
        "idempotency_key": draw(st.sampled_from(["", "k1", "k2", "dead0"])),
        "dedup_key": draw(st.sampled_from(["", "storm"])),
        "metadata": {},
    }
    for name in draw(st.sets(st.sampled_from(SEND_FIELDS), max_size=4)):
        if name == "intent":
            values[name] = draw(enum_number(INTENTS))
        elif name == "delivery_mode":
            values[name] = draw(enum_number(MODES))
        elif name == "priority":
            values[name] = draw(enum_number(PRIORITIES))
        elif name == "require_ack":
            values[name] = draw(st.booleans())
        elif name == "autonomy_context":
            values[name] = (draw(enum_number(AUTONOMY)), draw(text))
        elif name == "metadata":
            values[name] = draw(metadata)
        elif name == "notification_type":
            values[name] = draw(st.one_of(name_like, text))
        else:
            values[name] = draw(text)
    return values


def fill_send(target: pb.SendNotificationRequest, values: dict[str, Any]) -> None:
    """Fill in place: copying a message nested past protobuf's limit fails client-side."""
    for name, value in values.items():
        if name == "metadata":
            target.metadata.update(value)
        elif name == "autonomy_context":
            mode, agent = value
            target.autonomy_context.autonomy_mode = mode
            target.autonomy_context.agent_id = agent
        else:
            setattr(target, name, value)


def struct_into(target: Any, value: dict[str, Any]) -> None:
    target.update(value)


# --- one property per RPC ------------------------------------------------------------

Build = Callable[[st.DataObject, Fuzz], Message]


def _send(data: st.DataObject, world: Fuzz) -> Message:
    request = pb.SendNotificationRequest()
    fill_send(request, data.draw(send_fields()))
    return request


def _batch(data: st.DataObject, world: Fuzz) -> Message:
    """A few arbitrary sends; each failed item must carry its own rich status."""
    request = pb.BatchSendNotificationsRequest()
    for fields in data.draw(st.lists(send_fields(), max_size=4)):
        fill_send(request.requests.add(), fields)
    return request


def _simulate(data: st.DataObject, world: Fuzz) -> Message:
    request = pb.SimulateRequest()
    if data.draw(st.booleans()):  # an unset request is a request too
        fill_send(request.request, data.draw(send_fields()))
    return request


def _get(data: st.DataObject, world: Fuzz) -> Message:
    return pb.GetNotificationRequest(notification_id=data.draw(ids(world)))


FILTER_FIELDS = [
    "state",
    "status",
    "ack_state",
    "dead_letter",
    "notification_type",
    "source",
    "principal",
    "dedup_owner_id",
    "colour",
]
filter_values = st.one_of(
    st.sampled_from(
        ["PENDING", "NOTIFICATION_STATE_FAILED", "acked", "true", "FALSE", "maybe", '"x"']
    ),
    name_like,
    text.map(lambda s: '"' + s.replace('"', '\\"') + '"'),
)


# Long runs of what makes filter parsers backtrack (whitespace, quotes, backslashes,
# parentheses, operators, the keyword), around and far past the 4096-character cap.
FILTER_PIECES = [" ", "\t", '"', "\\", '\\"', "(", ")", "=", "!=", "AND", " AND ", "state = x"]
filter_runs = st.lists(
    st.tuples(st.sampled_from(FILTER_PIECES), st.integers(1, 20_000)), min_size=1, max_size=4
).map(lambda runs: "".join(piece * count for piece, count in runs))


def _list(data: st.DataObject, world: Fuzz) -> Message:
    terms = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(FILTER_FIELDS), st.sampled_from(["=", " = ", "!=", ""])
            ).flatmap(lambda ft: filter_values.map(lambda v: f"{ft[0]}{ft[1]}{v}")),
            max_size=3,
        )
    )
    joiner = data.draw(st.sampled_from([" AND ", " and ", "AND", "  AND  "]))
    filter_text = data.draw(st.one_of(st.just(joiner.join(terms)), text, filter_runs))
    return pb.ListNotificationsRequest(
        filter=filter_text,
        page_size=data.draw(page_size),
        page_token=data.draw(st.one_of(st.just(""), page_tokens(world))),
    )


def _watch(data: st.DataObject, world: Fuzz) -> Message:
    return pb.WatchEventsRequest(
        notification_ids=data.draw(
            mostly(
                st.lists(ids(world), max_size=5),
                st.integers(990, 1010).map(lambda n: [str(uuid.uuid4()) for _ in range(n)]),
            )
        ),
        kinds=data.draw(st.lists(mostly(st.sampled_from(KINDS), enum_number(KINDS)), max_size=5)),
        notification_type=data.draw(
            st.one_of(st.just(""), st.sampled_from(["demo.alert", "fuzz.ack"]), name_like, text)
        ),
        after_sequence=data.draw(
            mostly(st.integers(0, 200), st.one_of(st.integers(-3, -1), int64))
        ),
        replay_history=data.draw(st.booleans()),
    )


def _ack(data: st.DataObject, world: Fuzz) -> Message:
    request = pb.AcknowledgeRequest(
        notification_id=data.draw(ids(world)), dismiss=data.draw(st.booleans())
    )
    struct_into(request.metadata, data.draw(mostly(small_metadata, metadata)))
    return request


def _snooze(data: st.DataObject, world: Fuzz) -> Message:
    request = pb.SnoozeNotificationRequest(notification_id=data.draw(ids(world)))
    seconds = data.draw(st.one_of(st.integers(-10, 90_000), st.integers(-(2**40), 2**40)))
    request.duration.seconds = seconds
    request.duration.nanos = data.draw(st.integers(-999_999_999, 999_999_999))
    return request


def _replay(data: st.DataObject, world: Fuzz) -> Message:
    return pb.ReplayRequest(notification_id=data.draw(ids(world)), reason=data.draw(text))


def _resolve(data: st.DataObject, world: Fuzz) -> Message:
    return pb.ResolveFailureRequest(notification_id=data.draw(ids(world)), reason=data.draw(text))


def _withdraw(data: st.DataObject, world: Fuzz) -> Message:
    return pb.WithdrawNotificationRequest(
        notification_id=data.draw(ids(world)), reason=data.draw(text)
    )


policy_types = mostly(
    st.sampled_from(["fuzz.ack", "fuzz.dead", "fuzz.new", "demo.alert"]), st.one_of(name_like, text)
)


def _put(data: st.DataObject, world: Fuzz) -> Message:
    """A valid spec with up to three fields replaced by arbitrary values."""
    spec = ppb.PolicySpec(
        channels=data.draw(st.lists(st.sampled_from(["log", "broken"]), min_size=1, max_size=2)),
        delivery_mode=data.draw(st.sampled_from(MODES[1:])),
        require_ack=data.draw(st.booleans()),
        ack_timeout_minutes=data.draw(st.integers(0, 10080)),
        priority=data.draw(st.sampled_from(PRIORITIES)),
        dedup_window_seconds=data.draw(st.integers(0, 86400)),
        max_attempts=data.draw(st.integers(0, 100)),
    )
    hostile: dict[str, st.SearchStrategy[Any]] = {
        "channels": st.lists(st.one_of(st.sampled_from(["nope", "LOG", ""]), text), max_size=4),
        "delivery_mode": enum_number(MODES),
        "ack_timeout_minutes": st.one_of(st.integers(-1, 10081), int32),
        "priority": enum_number(PRIORITIES),
        "dedup_window_seconds": st.one_of(st.integers(-1, 86401), int32),
        "max_attempts": st.one_of(st.integers(-1, 101), int32),
    }
    for name in data.draw(st.sets(st.sampled_from(sorted(hostile)), max_size=3)):
        value = data.draw(hostile[name])
        if name == "channels":
            del spec.channels[:]
            spec.channels.extend(value)
        else:
            setattr(spec, name, value)
    return ppb.PutPolicyRevisionRequest(
        notification_type=data.draw(policy_types),
        spec=spec,
        activate=data.draw(st.booleans()),
    )


def _activate(data: st.DataObject, world: Fuzz) -> Message:
    return ppb.ActivatePolicyRevisionRequest(
        notification_type=data.draw(policy_types),
        revision=data.draw(st.one_of(st.integers(-1, 4), int32)),
    )


def _get_policy(data: st.DataObject, world: Fuzz) -> Message:
    return ppb.GetPolicyRequest(
        notification_type=data.draw(policy_types),
        revision=data.draw(st.one_of(st.integers(-1, 4), int32)),
    )


def _list_policies(data: st.DataObject, world: Fuzz) -> Message:
    return ppb.ListPolicyRevisionsRequest(
        notification_type=data.draw(policy_types),
        page_size=data.draw(page_size),
        page_token=data.draw(st.one_of(st.just(""), page_tokens(world))),
    )


def _audit(request_type: Any) -> Build:
    def build(data: st.DataObject, world: Fuzz) -> Message:
        message: Message = request_type(
            notification_id=data.draw(ids(world)),
            page_size=data.draw(page_size),
            page_token=data.draw(st.one_of(st.just(""), page_tokens(world))),
        )
        return message

    return build


ROLES: list[Any] = [int(v) for v in kpb.Role.values()]


def _create_key(data: st.DataObject, world: Fuzz) -> Message:
    return kpb.CreateApiKeyRequest(
        principal=data.draw(mostly(name_like, text)),
        roles=data.draw(st.lists(enum_number(ROLES), max_size=4)),
        description=data.draw(text),
    )


def _list_keys(data: st.DataObject, world: Fuzz) -> Message:
    return kpb.ListApiKeysRequest(
        page_size=data.draw(page_size),
        page_token=data.draw(st.one_of(st.just(""), page_tokens(world))),
    )


def _revoke_key(data: st.DataObject, world: Fuzz) -> Message:
    # Never the fuzzing callers' own keys: they live in the key file, not the database.
    return kpb.RevokeApiKeyRequest(key=data.draw(mostly(name_like, text)))


BUILDERS: dict[str, Build] = {
    "NotificationService/SendNotification": _send,
    "NotificationService/BatchSendNotifications": _batch,
    "NotificationService/Simulate": _simulate,
    "NotificationService/GetNotification": _get,
    "NotificationService/ListNotifications": _list,
    "NotificationService/WatchEvents": _watch,
    "NotificationService/Acknowledge": _ack,
    "NotificationService/SnoozeNotification": _snooze,
    "NotificationService/Replay": _replay,
    "NotificationService/ResolveFailure": _resolve,
    "NotificationService/WithdrawNotification": _withdraw,
    "PolicyService/PutPolicyRevision": _put,
    "PolicyService/ActivatePolicyRevision": _activate,
    "PolicyService/GetPolicy": _get_policy,
    "PolicyService/ListPolicyRevisions": _list_policies,
    "AuditService/ListDeliveryAuditRecords": _audit(apb.ListDeliveryAuditRecordsRequest),
    "AuditService/ListAckAuditRecords": _audit(apb.ListAckAuditRecordsRequest),
    "KeyService/CreateApiKey": _create_key,
    "KeyService/ListApiKeys": _list_keys,
    "KeyService/RevokeApiKey": _revoke_key,
}


@pytest.mark.parametrize("rpc", sorted(BUILDERS))
@FUZZ
@given(data=st.data())
async def test_fuzz_rpc(fuzz: Fuzz, rpc: str, data: st.DataObject) -> None:
    request = BUILDERS[rpc](data, fuzz)
    await check(fuzz.server, fuzz.caller(rpc), rpc, request)


def test_fuzz_builders_cover_every_rpc() -> None:
    assert set(BUILDERS) == ALL_RPCS


# Printable ASCII: grpc refuses other metadata values on the client side.
authorizations = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60).map(
        lambda s: f"Bearer {s}"
    ),
)


@FUZZ
@given(data=st.data(), rpc=st.sampled_from(sorted(BUILDERS)), authorization=authorizations)
async def test_fuzz_credentials(
    fuzz: Fuzz, data: st.DataObject, rpc: str, authorization: str | None
) -> None:
    """Without a valid key every RPC answers UNAUTHENTICATED, whatever the request."""
    request = BUILDERS[rpc](data, fuzz)
    reason = await check(fuzz.server, fuzz.callers.raw(authorization), rpc, request)
    assert reason in ("UNAUTHENTICATED", "TRANSPORT_LIMIT"), (rpc, authorization, reason)


@FUZZ
@given(
    rpc=st.sampled_from(sorted(BUILDERS)),
    body=st.one_of(
        st.binary(max_size=200),
        # Valid field tags with garbage payloads: length-delimited field 1..15.
        st.tuples(st.integers(1, 15), st.binary(max_size=50)).map(
            lambda v: bytes([(v[0] << 3) | 2, len(v[1])]) + v[1]
        ),
    ),
)
async def test_fuzz_raw_bytes(fuzz: Fuzz, rpc: str, body: bytes) -> None:
    """Bytes that are not a valid request message: INVALID_REQUEST (or, where they happen
    to parse, an ordinary answer), never UNKNOWN."""
    caller = fuzz.caller(rpc)
    channel = grpc.aio.insecure_channel(fuzz.server.target)
    try:
        service, _, method = rpc.partition("/")
        path = f"/uns.v1.{service}/{method}"
        identity: Callable[[bytes], bytes] = lambda b: b  # noqa: E731
        before = await row_counts(fuzz.server)
        try:
            if rpc == "NotificationService/WatchEvents":
                stream = channel.unary_stream(
                    path, request_serializer=identity, response_deserializer=identity
                )(body, metadata=caller.metadata, timeout=RPC_SECONDS)
                try:
                    async for _ in stream:
                        break
                finally:
                    stream.cancel()
            else:
                await channel.unary_unary(
                    path, request_serializer=identity, response_deserializer=identity
                )(body, metadata=caller.metadata, timeout=RPC_SECONDS)
            reason = OK
        except grpc.aio.AioRpcError as answer:
            assert answer.code() not in (
                grpc.StatusCode.INTERNAL,
                grpc.StatusCode.UNKNOWN,
                grpc.StatusCode.UNAVAILABLE,
            ), f"{rpc}: {answer.code().name} {answer.details()!r}"
            err = rich_error(answer)
            assert err.domain == "uns.v1" and answer.code() == SPEC_REASONS[err.reason]
            reason = err.reason
        if reason != OK or rpc not in WRITING_RPCS:
            assert await row_counts(fuzz.server) == before, (rpc, reason)
    finally:
        await channel.close()


# --- fixed adversarial inputs on both dialects ---------------------------------------


def corpus(world: Fuzz) -> list[tuple[str, Message]]:
    pending_ack, dead = world.ids[0], world.ids[4]
    deep = pb.SendNotificationRequest()
    fill_send(deep, {"title": "t", "message": "m", "source": "s", "intent": 1})
    deep.notification_type = "demo.alert"
    level = deep.metadata
    for _ in range(40):
        level = level.fields["d"].struct_value
    nan = send_request()
    nan.metadata.fields["x"].number_value = float("nan")
    cases: list[tuple[str, Message]] = [
        ("NotificationService/SendNotification", deep),
        ("NotificationService/SendNotification", nan),
        ("NotificationService/SendNotification", send_request(title="a\x00b")),
        ("NotificationService/SendNotification", send_request(intent=2**31 - 1)),
        ("NotificationService/Simulate", pb.SimulateRequest()),
        ("NotificationService/GetNotification", pb.GetNotificationRequest(notification_id="\x00")),
        ("NotificationService/WatchEvents", pb.WatchEventsRequest(notification_type="a\x00b")),
        ("NotificationService/WatchEvents", pb.WatchEventsRequest(after_sequence=-(2**63))),
        ("NotificationService/WatchEvents", pb.WatchEventsRequest(after_sequence=2**63 - 1)),
        (
            "NotificationService/WatchEvents",
            pb.WatchEventsRequest(kinds=[t.EVENT_KIND_ATTEMPT_STARTED] * 300_000),
        ),
        (
            "NotificationService/WatchEvents",
            pb.WatchEventsRequest(notification_ids=[str(uuid.uuid4()) for _ in range(1001)]),
        ),
        (
            "NotificationService/ListNotifications",
            pb.ListNotificationsRequest(filter='source = "a\x00b"'),
        ),
        (
            "NotificationService/ListNotifications",
            pb.ListNotificationsRequest(filter="principal = \x00"),
        ),
    ]
    for created in (
        "2020-01-01T00:00:00",  # no time zone
        "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-14:00",  # after year 9999 in UTC
        "0001-01-01T00:00:00+00:00",
        "9999-12-31T23:59:59+00:00",
    ):
        token = token_of([created, "\x00", ""])
        cases.append(
            (
                "NotificationService/ListNotifications",
                pb.ListNotificationsRequest(page_token=token),
            )
        )
    for last in (10**30, -1, 0, 2**31, True, 1.5, "1"):
        cases.append(
            (
                "PolicyService/ListPolicyRevisions",
                ppb.ListPolicyRevisionsRequest(
                    notification_type="demo.alert", page_token=token_of([1, "demo.alert", last])
                ),
            )
        )
    for offset in (10**30, -1, 2**63, 1.5):
        cases.append(
            (
                "AuditService/ListAckAuditRecords",
                apb.ListAckAuditRecordsRequest(
                    notification_id=UNKNOWN_ID, page_token=token_of([UNKNOWN_ID, offset])
                ),
            )
        )
    # JSON nested past the parser's recursion limit (it raised RecursionError: INTERNAL).
    nested = base64.urlsafe_b64encode(b"[" * 100_000).decode()
    cases += [
        ("NotificationService/ListNotifications", pb.ListNotificationsRequest(page_token=nested)),
        (
            "PolicyService/ListPolicyRevisions",
            ppb.ListPolicyRevisionsRequest(notification_type="demo.alert", page_token=nested),
        ),
        (
            "AuditService/ListAckAuditRecords",
            apb.ListAckAuditRecordsRequest(notification_id=UNKNOWN_ID, page_token=nested),
        ),
        ("KeyService/ListApiKeys", kpb.ListApiKeysRequest(page_token=nested)),
    ]
    cases += [
        (
            "PolicyService/GetPolicy",
            ppb.GetPolicyRequest(notification_type="x", revision=2**31 - 1),
        ),
        (
            "PolicyService/ActivatePolicyRevision",
            ppb.ActivatePolicyRevisionRequest(notification_type="x", revision=-(2**31)),
        ),
        (
            "PolicyService/PutPolicyRevision",
            ppb.PutPolicyRevisionRequest(
                notification_type="x",
                spec=ppb.PolicySpec(
                    channels=["log"],
                    delivery_mode=t.DELIVERY_MODE_BEST_EFFORT,
                    ack_timeout_minutes=2**31 - 1,
                ),
            ),
        ),
        ("NotificationService/Replay", pb.ReplayRequest(notification_id=UNKNOWN_ID, reason="\x00")),
        # Reasons and metadata end up in JSONB payloads on PostgreSQL, which refuse NUL.
        ("NotificationService/Replay", pb.ReplayRequest(notification_id=dead, reason="\x00")),
        (
            "NotificationService/ResolveFailure",
            pb.ResolveFailureRequest(notification_id=dead, reason="a\x00b"),
        ),
    ]
    for metadata in ({"k": "\x00"}, {"\x00": 1}, {"k": ["\x00"]}):
        ack = pb.AcknowledgeRequest(notification_id=pending_ack)
        ack.metadata.update(metadata)
        cases.append(("NotificationService/Acknowledge", ack))
    # Refusals that quote the input back must stay readable: grpc clients drop status
    # trailers over 16 KiB, which would turn INVALID_REQUEST into a bare RESOURCE_EXHAUSTED.
    for hostile in ("x" * 20_000, "colour" * 4000 + " = 1", 'state = "' + "y" * 20_000 + '"'):
        cases.append(
            ("NotificationService/ListNotifications", pb.ListNotificationsRequest(filter=hostile))
        )
    # Runs of one hostile piece up to the message-size limit (issue 20: the regex
    # parser was quadratic on some), and metadata as wide as a request can carry.
    for unit in (" \t", '"', "\\", '\\"', "((", "= != ", " AND ", "state = x AND ", 'source = "'):
        hostile_filter = unit * ((MAX_RECEIVE_MESSAGE_BYTES_DEFAULT - 64) // len(unit))
        cases.append(
            (
                "NotificationService/ListNotifications",
                pb.ListNotificationsRequest(filter=hostile_filter),
            )
        )
    wide_send = send_request()
    wide_send.metadata.update({f"k{i:06d}": "v" for i in range(60_000)})
    wide_ack = pb.AcknowledgeRequest(notification_id=pending_ack)
    wide_ack.metadata.update({f"k{i:06d}": 1.5 for i in range(45_000)})
    cases += [
        ("NotificationService/SendNotification", wide_send),
        ("NotificationService/Simulate", pb.SimulateRequest(request=wide_send)),
        ("NotificationService/Acknowledge", wide_ack),
    ]
    # Every filterable column compared with values it can never hold.
    for name in FILTER_FIELDS:
        for value in ('"not-a-uuid"', '"' + "x" * 300 + '"', '"\u00e9\U0001f642"', "-1"):
            cases.append(
                (
                    "NotificationService/ListNotifications",
                    pb.ListNotificationsRequest(filter=f"{name} = {value}"),
                )
            )
    return cases


async def test_adversarial_corpus(db_url: str, tmp_path: Path) -> None:
    server = await seeded_server(db_url, tmp_path)
    try:
        world = Fuzz(server, Callers(server))
        await seed(world)
        failures = []
        for rpc, request in corpus(world):
            try:
                await check(server, world.caller(rpc), rpc, request)
            except AssertionError as exc:
                failures.append(f"{rpc} {str(request)[:120]!r}: {str(exc)[:300]}")
        assert not failures, "\n".join(failures)
    finally:
        await server.stop()
