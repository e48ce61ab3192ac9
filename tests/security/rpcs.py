"""Call any UNS RPC as any caller and reduce the answer to an ``Outcome``.

Every uns.v1 RPC (NotificationService, PolicyService, AuditService) is reachable by its
name; WatchEvents counts as answered once the stream has sent its first message (the
server sends a positioning heartbeat at once). Errors are read with ``rich_error``, which
asserts exactly one ErrorInfo.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message
from sqlalchemy import func, select

from tests.support.grpc_errors import RichError, rich_error
from tests.support.server import KEYS, RunningServer
from uns.v1 import audit_service_pb2 as apb
from uns.v1 import audit_service_pb2_grpc as apb_grpc
from uns.v1 import key_service_pb2 as kpb
from uns.v1 import key_service_pb2_grpc as kpb_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import policy_service_pb2_grpc as ppb_grpc
from uns.v1 import types_pb2 as t
from uns_server.store import tables

DOMAIN = "uns.v1"
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"

SERVICES = {
    "NotificationService": pb.DESCRIPTOR.services_by_name["NotificationService"],
    "PolicyService": ppb.DESCRIPTOR.services_by_name["PolicyService"],
    "AuditService": apb.DESCRIPTOR.services_by_name["AuditService"],
    "KeyService": kpb.DESCRIPTOR.services_by_name["KeyService"],
}
# Every RPC of the services, as "Service/Method".
ALL_RPCS = frozenset(f"{name}/{m.name}" for name, s in SERVICES.items() for m in s.methods)

# SPEC §1 (Errors): reason -> code, for every answer the service produces itself.
SPEC_REASONS: dict[str, grpc.StatusCode] = {
    "INVALID_REQUEST": grpc.StatusCode.INVALID_ARGUMENT,
    "RESERVED_METADATA_KEY": grpc.StatusCode.INVALID_ARGUMENT,
    "POLICY_OVERRIDE": grpc.StatusCode.INVALID_ARGUMENT,
    "UNKNOWN_CHANNEL": grpc.StatusCode.INVALID_ARGUMENT,
    "IDEMPOTENCY_CONFLICT": grpc.StatusCode.ALREADY_EXISTS,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "ACK_NOT_PENDING": grpc.StatusCode.FAILED_PRECONDITION,
    "ACK_CONFLICT": grpc.StatusCode.ABORTED,
    "ACK_DEADLINE_PASSED": grpc.StatusCode.FAILED_PRECONDITION,
    "NOT_DEAD_LETTERED": grpc.StatusCode.FAILED_PRECONDITION,
    "REPLAY_BLOCKED": grpc.StatusCode.FAILED_PRECONDITION,
    "RECIPIENT_IN_USE": grpc.StatusCode.FAILED_PRECONDITION,
    "NOT_WITHDRAWABLE": grpc.StatusCode.FAILED_PRECONDITION,
    "TYPE_NOT_ALLOWED": grpc.StatusCode.PERMISSION_DENIED,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    # Beyond the SPEC table: WatchEvents resume below retention, and the stream limit.
    "HISTORY_COMPACTED": grpc.StatusCode.OUT_OF_RANGE,
    "TOO_MANY_STREAMS": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "RATE_LIMITED": grpc.StatusCode.RESOURCE_EXHAUSTED,
}

OK = "OK"


@dataclass(frozen=True)
class Outcome:
    """``OK`` (with the response) or the refusal's code and ErrorInfo."""

    reason: str  # "OK" or the ErrorInfo reason
    code: grpc.StatusCode
    response: Any = None
    error: RichError | None = None
    # Everything of a refusal a client can read: the message and every trailer (the
    # encoded google.rpc.Status with all its details included), as text.
    exposed: str = ""

    def __str__(self) -> str:
        return self.reason if self.error is None else f"{self.code.name}/{self.reason}"


class Caller:
    """One caller (an API key, a raw authorization value, or nothing) on one channel."""

    def __init__(self, channel: grpc.aio.Channel, authorization: str | None) -> None:
        self.authorization = authorization
        self._stubs: dict[str, Any] = {
            "NotificationService": pb_grpc.NotificationServiceStub(channel),
            "PolicyService": ppb_grpc.PolicyServiceStub(channel),
            "AuditService": apb_grpc.AuditServiceStub(channel),
            "KeyService": kpb_grpc.KeyServiceStub(channel),
        }

    @property
    def metadata(self) -> Sequence[tuple[str, str]]:
        return () if self.authorization is None else (("authorization", self.authorization),)

    def method(self, rpc: str) -> Any:
        service, _, name = rpc.partition("/")
        return getattr(self._stubs[service], name)

    async def call(self, rpc: str, request: Message, rpc_timeout: float = 10.0) -> Outcome:
        """The outcome of one call; a stream is answered by its first message."""
        try:
            if rpc == "NotificationService/WatchEvents":
                response = await self._first_message(request, rpc_timeout)
            else:
                response = await self.method(rpc)(
                    request, metadata=self.metadata, timeout=rpc_timeout
                )
        except grpc.aio.AioRpcError as err:
            return refusal(err)
        return Outcome(OK, grpc.StatusCode.OK, response=response)

    async def _first_message(self, request: Message, rpc_timeout: float) -> pb.WatchEventsResponse:
        stream = self.method("NotificationService/WatchEvents")(
            request, metadata=self.metadata, timeout=rpc_timeout
        )
        try:
            async for response in stream:
                assert isinstance(response, pb.WatchEventsResponse)
                return response
            raise AssertionError("WatchEvents ended without a message")
        finally:
            stream.cancel()

    async def history(self, request: pb.WatchEventsRequest, within: float = 15.0) -> list[t.Event]:
        """Every event a replaying stream delivers before its first heartbeat (the end of
        the catch-up: everything committed and visible when the stream started)."""
        assert request.replay_history or request.after_sequence > 0
        events: list[t.Event] = []
        stream = self.method("NotificationService/WatchEvents")(
            request, metadata=self.metadata, timeout=None
        )

        async def read() -> None:
            async for response in stream:
                if response.HasField("heartbeat"):
                    return
                events.append(response.event)

        try:
            await asyncio.wait_for(read(), within)
        finally:
            stream.cancel()
        return events


def refusal(err: grpc.aio.AioRpcError) -> Outcome:
    rich = rich_error(err)  # asserts exactly one ErrorInfo
    assert rich.domain == DOMAIN, rich
    parts = [err.details() or ""]
    for key, value in err.trailing_metadata() or ():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        parts.append(f"{key}: {text}")
    return Outcome(rich.reason, rich.code, error=rich, exposed="\n".join(parts))


class Callers:
    """Callers for the test principals (KEYS) plus anonymous and forged credentials."""

    def __init__(self, server: RunningServer) -> None:
        self._channel = grpc.aio.insecure_channel(server.target)
        server.channels.append(self._channel)

    def __call__(self, who: str) -> Caller:
        return Caller(self._channel, f"Bearer {KEYS[who]}")

    def raw(self, authorization: str | None) -> Caller:
        return Caller(self._channel, authorization)


WRITTEN_TABLES = (
    tables.notifications,
    tables.events,
    tables.dedup,
    tables.notification_audit_records,
    tables.ack_audit_records,
    tables.policies,
    tables.policy_revisions,
)


async def row_counts(server: RunningServer) -> dict[str, int]:
    """Rows in every table a request can write, read through the server's own pool."""
    counts: dict[str, int] = {}
    async with server.app.db.read() as conn:
        for table in WRITTEN_TABLES:
            value = (await conn.execute(select(func.count()).select_from(table))).scalar()
            counts[table.name] = int(value or 0)
    return counts
