"""Typed errors: every failed call raises a subclass of ``UnsError``.

The server answers every refusal with a ``google.rpc.Status`` carrying exactly one
``ErrorInfo`` (domain ``uns.v1``) and, for field problems, a ``BadRequest``; the reason is
the stable API (SPEC §1). ``error_from_rpc`` reads those details out of the
``grpc-status-details-bin`` trailer (a ``RetryInfo`` becomes ``retry_delay``) and picks
the class from one table, by reason first and by status code for errors the transport
made up itself (connection refused, deadline, message too large), whose ``reason`` is
then the status code's name.

The class docstring is the default message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, cast

import grpc
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "uns.v1"
_DETAILS_KEY = "grpc-status-details-bin"


class UnsError(Exception):
    """The call failed."""

    retryable: ClassVar[bool] = False
    """True when the same call may succeed later (the service or the network is
    unavailable, or the deadline passed). Only calls that are safe to repeat should be
    retried: the client does that itself for SendNotification and reads."""

    def __init__(
        self,
        message: str | None = None,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        violations: Mapping[str, str] | None = None,
        retry_delay: float | None = None,
    ) -> None:
        self.message: str = message or (type(self).__doc__ or "").strip().splitlines()[0]
        """The server's human-readable message (``grpc.Call.details()``)."""
        self.code: grpc.StatusCode = code
        """The gRPC status code."""
        self.reason: str = reason or code.name
        """``ErrorInfo.reason`` (e.g. ``"IDEMPOTENCY_CONFLICT"``), or the status code's name
        when the error did not come from the service (e.g. ``"UNAVAILABLE"``)."""
        self.domain: str = domain
        """``ErrorInfo.domain``: ``"uns.v1"`` for errors the service produced."""
        self.metadata: dict[str, str] = dict(metadata or {})
        """``ErrorInfo.metadata``: every dynamic value of the message."""
        self.violations: dict[str, str] = dict(violations or {})
        """``BadRequest`` field violations: field path -> description."""
        self.retry_delay: float | None = retry_delay
        """``google.rpc.RetryInfo.retry_delay`` in seconds, when the server said when to
        try again (``RateLimited``); the client's retries wait at least that long."""
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code.name}, reason={self.reason!r}, "
            f"message={self.message!r})"
        )


class InvalidRequest(UnsError):
    """The request is missing, oversized or malformed fields (see ``violations``)."""


class ReservedMetadataKey(UnsError):
    """Metadata holds a reserved routing key; routing lives in policy and configuration."""


class PolicyOverride(UnsError):
    """The request sets delivery_mode, require_ack or priority unlike the ACTIVE policy."""


class UnknownChannel(UnsError):
    """The policy names a channel the server does not have (``metadata.channels``)."""


class NoPolicy(UnsError):
    """The notification type (``metadata["notification_type"]``) has no ACTIVE policy and
    the server has no default channels: activate a policy for it, or fix its spelling."""


class RecipientInUse(UnsError):
    """The person is still named by a rotation (``metadata["rotations"]``) and cannot be
    deleted; remove them from those rotations first."""


class IdempotencyConflict(UnsError):
    """The idempotency key was already used with a different payload."""


class NotFound(UnsError):
    """No such notification, or one the caller may not see."""


class AckNotPending(UnsError):
    """The notification has no pending acknowledgement."""


class AckConflict(UnsError):
    """The acknowledgement was already settled by another actor or with another outcome."""


class AckDeadlinePassed(UnsError):
    """The acknowledgement deadline has passed; late acknowledgements are refused."""


class NotDeadLettered(UnsError):
    """The notification is not FAILED with dead_letter set."""


class NotWithdrawable(UnsError):
    """The obligation is already settled (delivered without a pending ack, deduplicated,
    answered, timed out, or withdrawn by someone else) and cannot be withdrawn."""


class ReplayBlocked(UnsError):
    """A dedup successor already carries this obligation; replaying would duplicate it."""


class Unauthenticated(UnsError):
    """Missing or unknown credentials."""


class PermissionDenied(UnsError):
    """The caller's role does not allow this call."""


class TypeNotAllowed(PermissionDenied):
    """The notification type's policy names the principals allowed to send it, and the
    caller is not one of them (``metadata["notification_type"]``)."""


class Unavailable(UnsError):
    """The server, its database or the network is unavailable; retry with backoff.

    Reasons: ``UNAVAILABLE`` (transport), ``STORAGE_UNAVAILABLE`` (the server's database),
    ``SHUTTING_DOWN`` (the server is stopping; ``metadata["resume_after_sequence"]`` on a
    watch stream).
    """

    retryable = True


class DeadlineExceeded(UnsError):
    """The call's deadline passed before the server answered; it may still have acted."""

    retryable = True


class HistoryCompacted(UnsError):
    """The watch cursor is older than retained history; ``metadata`` says where to resume."""


class Unimplemented(UnsError):
    """The server does not implement this call (yet)."""


class StorageFull(UnsError):
    """The server's database is out of space; nothing was written. Not retried by the
    client: an operator must free space (the server reports NOT_SERVING meanwhile).
    Retry later; idempotent calls are safe to repeat."""


class TooManyStreams(UnsError):
    """This principal holds as many WatchEvents streams as the server allows; close one."""


class RateLimited(UnsError):
    """The server shed the call before acting on it: the principal's request budget is
    spent (``metadata["limit"] == "principal"``), the server is at its limit of
    concurrent calls (``"concurrent_rpcs"``), or too many unknown keys came from this
    address (``"failed_authentications"``). Retry after ``retry_delay`` seconds; every
    call is safe to repeat, since nothing was done."""

    retryable = True


class Internal(UnsError):
    """The server failed unexpectedly; the call's outcome is unknown (``metadata`` has a
    reference to the server's log). Retry only idempotent calls."""


# The one table: ErrorInfo reason (or, without ErrorInfo, the status code name) -> class.
ERROR_BY_REASON: Mapping[str, type[UnsError]] = {
    "INVALID_REQUEST": InvalidRequest,
    "RESERVED_METADATA_KEY": ReservedMetadataKey,
    "POLICY_OVERRIDE": PolicyOverride,
    "UNKNOWN_CHANNEL": UnknownChannel,
    "NO_POLICY": NoPolicy,
    "IDEMPOTENCY_CONFLICT": IdempotencyConflict,
    "NOT_FOUND": NotFound,
    "ACK_NOT_PENDING": AckNotPending,
    "ACK_CONFLICT": AckConflict,
    "ACK_DEADLINE_PASSED": AckDeadlinePassed,
    "NOT_DEAD_LETTERED": NotDeadLettered,
    "REPLAY_BLOCKED": ReplayBlocked,
    "RECIPIENT_IN_USE": RecipientInUse,
    "NOT_WITHDRAWABLE": NotWithdrawable,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "TYPE_NOT_ALLOWED": TypeNotAllowed,
    "UNAVAILABLE": Unavailable,
    "STORAGE_UNAVAILABLE": Unavailable,
    "SHUTTING_DOWN": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "HISTORY_COMPACTED": HistoryCompacted,
    "UNIMPLEMENTED": Unimplemented,
    "TOO_MANY_STREAMS": TooManyStreams,
    "STORAGE_FULL": StorageFull,
    "RATE_LIMITED": RateLimited,
    "INTERNAL": Internal,
}

# Fallback for reasons this client does not know (a newer server, a proxy): only codes
# whose meaning does not depend on the reason.
_ERROR_BY_CODE: Mapping[grpc.StatusCode, type[UnsError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
}


def error_class(reason: str, code: grpc.StatusCode) -> type[UnsError]:
    """The most specific class for ``reason``, else for ``code``, else ``UnsError``."""
    return ERROR_BY_REASON.get(reason) or _ERROR_BY_CODE.get(code) or UnsError


def error_from_rpc(error: grpc.RpcError) -> UnsError:
    """The typed error for a failed call (sync ``grpc.RpcError`` or ``grpc.aio.AioRpcError``).

    Raise it ``from`` the original to keep the transport error as ``__cause__``.
    """
    code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
    details = error.details() if callable(getattr(error, "details", None)) else None
    return _typed(code, details or None, _status_details(error))


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def error_from_status(status: status_pb2.Status) -> UnsError:
    """The typed error for a ``google.rpc.Status`` message (a failed item of
    ``send_many``)."""
    return _typed(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), None, status)


def _typed(code: grpc.StatusCode, details: str | None, status: status_pb2.Status) -> UnsError:
    info = error_details_pb2.ErrorInfo()
    bad = error_details_pb2.BadRequest()
    retry = error_details_pb2.RetryInfo()
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and not info.reason:
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            detail.Unpack(bad)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            detail.Unpack(retry)
    reason = info.reason or code.name
    cls = error_class(reason, code)
    return cls(
        details or status.message or None,
        code=code,
        reason=reason,
        domain=info.domain,
        metadata=dict(info.metadata),
        violations={v.field: v.description for v in bad.field_violations},
        retry_delay=(
            retry.retry_delay.ToTimedelta().total_seconds()
            if retry.HasField("retry_delay")
            else None
        ),
    )


def _status_details(error: grpc.RpcError) -> status_pb2.Status:
    status = status_pb2.Status()
    trailing_metadata = getattr(error, "trailing_metadata", None)
    # (key, value) pairs: a tuple from blocking stubs, grpc.aio.Metadata from asyncio ones.
    pairs = cast(Iterable[tuple[str, Any]], trailing_metadata() if trailing_metadata else ())
    for key, value in pairs or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            try:
                status.MergeFromString(value)
            except Exception:  # a malformed trailer must not hide the original error
                return status_pb2.Status()
    return status
