"""Typed errors: the server's refusals arrive as the UnsError subclass of their reason, with
the status code, ErrorInfo metadata and BadRequest violations; the mapping table covers
every reason of SPEC §1 and falls back by status code."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

import uns_clients
from tests.clients.helpers import FakeRpcError, config_for, send_fields
from tests.support.server import RunningServer
from uns_clients import (
    AsyncClient,
    Client,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ReservedMetadataKey,
    Unauthenticated,
    Unavailable,
    UnsError,
)
from uns_clients._errors import ERROR_BY_REASON, error_from_rpc

AsyncClients = Callable[[str], AsyncClient]
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


async def test_idempotency_conflict(server: RunningServer, async_client: AsyncClients) -> None:
    alice = async_client("alice")
    await alice.send(**send_fields(idempotency_key="same"))
    with pytest.raises(IdempotencyConflict) as exc:
        await alice.send(**send_fields(idempotency_key="same", title="other"))
    err = exc.value
    assert (err.code, err.reason, err.domain) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "IDEMPOTENCY_CONFLICT",
        "uns.v1",
    )
    assert not err.retryable
    assert isinstance(err.__cause__, grpc.aio.AioRpcError)


async def test_invalid_request_carries_violations(
    server: RunningServer, async_client: AsyncClients
) -> None:
    with pytest.raises(InvalidRequest) as exc:
        await async_client("alice").send(**send_fields(title="x" * 300, source=""))
    err = exc.value
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.reason == "INVALID_REQUEST"
    assert {"title", "source"} <= set(err.violations)
    assert all(err.violations.values())
    assert "INVALID_REQUEST" in str(err)


async def test_reserved_metadata_key(server: RunningServer, async_client: AsyncClients) -> None:
    with pytest.raises(ReservedMetadataKey) as exc:
        await async_client("alice").send(**send_fields(metadata={"slack_channel": "#ceo"}))
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_not_found_hides_other_principals(
    server: RunningServer, async_client: AsyncClients
) -> None:
    sent = await async_client("alice").send(**send_fields())
    with pytest.raises(NotFound) as exc:
        await async_client("bob").get(sent.notification_id)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(NotFound):
        await async_client("alice").get(UNKNOWN_ID)


@pytest.mark.parametrize("key", ["uns_not_a_key", ""])
async def test_unauthenticated(server: RunningServer, key: str) -> None:
    config = config_for(server.target, key or "x")
    if not key:
        config = replace(config, api_key=None)
    async with AsyncClient(config) as client:
        with pytest.raises(Unauthenticated) as exc:
            await client.send(**send_fields())
    assert exc.value.code == grpc.StatusCode.UNAUTHENTICATED


async def test_permission_denied(server: RunningServer, async_client: AsyncClients) -> None:
    with pytest.raises(PermissionDenied):
        await async_client("rita").send(**send_fields())  # responder, not producer
    with pytest.raises(PermissionDenied):
        await async_client("alice").acknowledge(UNKNOWN_ID)  # producer, not responder
    with pytest.raises(PermissionDenied):
        await async_client("alice").replay(UNKNOWN_ID)  # producer, not operator


async def test_sync_client_raises_the_same_types(server: RunningServer) -> None:
    def work() -> list[UnsError]:
        errors: list[UnsError] = []
        with Client(config_for(server.target, "alice")) as alice:
            alice.send(**send_fields(idempotency_key="sync-same"))
            for call in (
                lambda: alice.send(**send_fields(idempotency_key="sync-same", title="other")),
                lambda: alice.get(UNKNOWN_ID),
                lambda: alice.send(**send_fields(title="")),
            ):
                try:
                    call()
                except UnsError as exc:
                    errors.append(exc)
        return errors

    errors = await asyncio.to_thread(work)
    assert [type(e) for e in errors] == [IdempotencyConflict, NotFound, InvalidRequest]
    assert "title" in errors[2].violations
    assert isinstance(errors[0].__cause__, grpc.RpcError)


async def test_connection_refused_is_unavailable() -> None:
    async with AsyncClient(config_for("127.0.0.1:1", retry_max_attempts=2)) as client:
        with pytest.raises(Unavailable) as exc:
            await client.get(UNKNOWN_ID)
    assert exc.value.reason == "UNAVAILABLE" and exc.value.retryable


# The mapping table, without a server. SPEC §1 plus the transport-level reasons;
# SHUTTING_DOWN is what the server answers (UNAVAILABLE) to watch streams when it stops.

SPEC_REASONS = {
    "INVALID_REQUEST": "InvalidRequest",
    "RESERVED_METADATA_KEY": "ReservedMetadataKey",
    "POLICY_OVERRIDE": "PolicyOverride",
    "UNKNOWN_CHANNEL": "UnknownChannel",
    "NO_POLICY": "NoPolicy",
    "IDEMPOTENCY_CONFLICT": "IdempotencyConflict",
    "NOT_FOUND": "NotFound",
    "ACK_NOT_PENDING": "AckNotPending",
    "ACK_CONFLICT": "AckConflict",
    "ACK_DEADLINE_PASSED": "AckDeadlinePassed",
    "NOT_DEAD_LETTERED": "NotDeadLettered",
    "NOT_WITHDRAWABLE": "NotWithdrawable",
    "REPLAY_BLOCKED": "ReplayBlocked",
    "RECIPIENT_IN_USE": "RecipientInUse",
    "UNAUTHENTICATED": "Unauthenticated",
    "PERMISSION_DENIED": "PermissionDenied",
    "TYPE_NOT_ALLOWED": "TypeNotAllowed",
    "UNAVAILABLE": "Unavailable",
    "STORAGE_UNAVAILABLE": "Unavailable",
    "SHUTTING_DOWN": "Unavailable",
    "DEADLINE_EXCEEDED": "DeadlineExceeded",
    "HISTORY_COMPACTED": "HistoryCompacted",
    "UNIMPLEMENTED": "Unimplemented",
    "TOO_MANY_STREAMS": "TooManyStreams",
    "STORAGE_FULL": "StorageFull",
    "RATE_LIMITED": "RateLimited",
    "INTERNAL": "Internal",
}


def rich(
    code: grpc.StatusCode, reason: str, *, violations: dict[str, str] | None = None
) -> FakeRpcError:
    details = []
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="uns.v1", metadata={"k": "v"}))
    details.append(info)
    if violations:
        bad = any_pb2.Any()
        bad.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
                    for f, d in violations.items()
                ]
            )
        )
        details.append(bad)
    status = status_pb2.Status(code=code.value[0], message="msg", details=details)
    return FakeRpcError(code, "msg", (("grpc-status-details-bin", status.SerializeToString()),))


def test_every_spec_reason_has_its_class() -> None:
    assert {r: c.__name__ for r, c in ERROR_BY_REASON.items()} == SPEC_REASONS
    for reason, name in SPEC_REASONS.items():
        err = error_from_rpc(rich(grpc.StatusCode.FAILED_PRECONDITION, reason))
        assert type(err) is getattr(uns_clients, name)
        assert (err.reason, err.domain, err.metadata, err.message) == (
            reason,
            "uns.v1",
            {"k": "v"},
            "msg",
        )


def test_violations_are_read_from_bad_request() -> None:
    err = error_from_rpc(
        rich(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST", violations={"title": "too long"})
    )
    assert isinstance(err, InvalidRequest) and err.violations == {"title": "too long"}


@pytest.mark.parametrize(
    ("code", "cls", "retryable"),
    [
        (grpc.StatusCode.UNAVAILABLE, uns_clients.Unavailable, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, uns_clients.DeadlineExceeded, True),
        (grpc.StatusCode.UNIMPLEMENTED, uns_clients.Unimplemented, False),
        (grpc.StatusCode.PERMISSION_DENIED, uns_clients.PermissionDenied, False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, UnsError, False),
        (grpc.StatusCode.INTERNAL, uns_clients.Internal, False),
    ],
)
def test_without_error_info_the_code_decides(
    code: grpc.StatusCode, cls: type[UnsError], retryable: bool
) -> None:
    err = error_from_rpc(FakeRpcError(code, "transport says no"))
    assert type(err) is cls
    assert (err.code, err.reason, err.retryable) == (code, code.name, retryable)
    assert err.violations == {} and err.metadata == {}


def test_unknown_reason_falls_back_by_code_and_malformed_trailer_is_ignored() -> None:
    err = error_from_rpc(rich(grpc.StatusCode.NOT_FOUND, "SOMETHING_NEW"))
    assert type(err) is NotFound and err.reason == "SOMETHING_NEW"
    err = error_from_rpc(rich(grpc.StatusCode.ABORTED, "SOMETHING_NEW"))
    assert type(err) is UnsError
    garbled = FakeRpcError(
        grpc.StatusCode.UNAVAILABLE, "x", (("grpc-status-details-bin", b"\xff\xff"),)
    )
    assert type(error_from_rpc(garbled)) is Unavailable
