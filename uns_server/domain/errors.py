"""Every refusal the service produces, one class per ErrorInfo reason (SPEC §1, Errors).

The transport maps each class to a gRPC status code in one table
(``uns_server.api.errors``); clients switch on ``reason``. The class docstring is the
default message. ``metadata`` carries every dynamic value of the message (AIP-193).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class FieldViolation:
    """One invalid field, reported as a ``google.rpc.BadRequest`` field violation."""

    field: str
    description: str


class UnsError(Exception):
    """The request was refused."""

    reason: ClassVar[str] = "INTERNAL"

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
    ) -> None:
        self.message = message or (self.__doc__ or self.reason).strip().splitlines()[0]
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)
        super().__init__(self.message)

    def nested(self, parent: str) -> UnsError:
        """This refusal for a request that carries the checked message in its field
        ``parent`` (``SimulateRequest.request``): a field path names a field of the
        request the caller sent (AIP-193), so every path gains ``parent.``, in the
        BadRequest, the ErrorInfo metadata and a message that starts with a path."""
        paths = {v.field for v in self.violations}
        self.violations = tuple(
            FieldViolation(f"{parent}.{v.field}", v.description) for v in self.violations
        )
        for key in ("fields", "field"):
            if key in self.metadata:
                self.metadata[key] = ",".join(
                    f"{parent}.{name}" for name in self.metadata[key].split(",")
                )
        head, sep, _ = self.message.partition(": ")
        if sep and head in paths:
            self.message = f"{parent}.{self.message}"
            self.args = (self.message,)
        return self


class InvalidRequest(UnsError):
    """The request is missing, oversized or malformed fields."""

    reason = "INVALID_REQUEST"

    @classmethod
    def of_field(cls, field: str, description: str) -> InvalidRequest:
        """One field's problem: in the message, the ErrorInfo and the BadRequest."""
        return cls(
            f"{field}: {description}",
            metadata={"fields": field},
            violations=[FieldViolation(field, description)],
        )


class ReservedMetadataKey(UnsError):
    """Metadata holds a reserved routing key; routing lives in policy and configuration."""

    reason = "RESERVED_METADATA_KEY"


class PolicyOverride(UnsError):
    """The request overrides a value fixed by the ACTIVE policy of its notification type."""

    reason = "POLICY_OVERRIDE"


class UnknownPolicyChannel(UnsError):
    """The policy names a channel that this server does not have (SPEC §6)."""

    reason = "UNKNOWN_CHANNEL"


class NoPolicy(UnsError):
    """The notification type has no ACTIVE policy and the server has no default channels."""

    reason = "NO_POLICY"


class RecipientInUse(UnsError):
    """The person is still referenced (a rotation's member or override) and cannot be deleted."""

    reason = "RECIPIENT_IN_USE"


class IdempotencyConflict(UnsError):
    """The idempotency key was already used with a different payload."""

    reason = "IDEMPOTENCY_CONFLICT"


class NotFound(UnsError):
    """No such notification (or not visible to the caller)."""

    reason = "NOT_FOUND"


class AckNotPending(UnsError):
    """The notification has no pending acknowledgement."""

    reason = "ACK_NOT_PENDING"


class AckConflict(UnsError):
    """The acknowledgement was already settled by another actor or with another outcome."""

    reason = "ACK_CONFLICT"


class AckDeadlinePassed(UnsError):
    """The acknowledgement deadline has passed; late acknowledgements are refused."""

    reason = "ACK_DEADLINE_PASSED"


class NotDeadLettered(UnsError):
    """The notification is not a dead-lettered failure."""

    reason = "NOT_DEAD_LETTERED"


class ReplayBlocked(UnsError):
    """A dedup successor already carries this obligation; replaying would duplicate it."""

    reason = "REPLAY_BLOCKED"


class Unauthenticated(UnsError):
    """Missing or unknown credentials."""

    reason = "UNAUTHENTICATED"


class PermissionDenied(UnsError):
    """The caller's role does not allow this call."""

    reason = "PERMISSION_DENIED"


class TypeNotAllowed(UnsError):
    """The ACTIVE policy of this notification type names the principals allowed to send
    it, and the caller is not one of them."""

    reason = "TYPE_NOT_ALLOWED"


class Unimplemented(UnsError):
    """This call is not implemented yet."""

    reason = "UNIMPLEMENTED"


class Internal(UnsError):
    """The server failed unexpectedly; the outcome of the call is unknown. Retry only
    idempotent calls. The message carries a reference to the server's log entry."""

    reason = "INTERNAL"


class StorageUnavailable(UnsError):
    """The database is unreachable; retry with backoff (idempotent calls are safe to retry)."""

    reason = "STORAGE_UNAVAILABLE"


class StorageFull(UnsError):
    """The server's database is out of space; nothing was written. Retry later: an
    operator must free space (idempotent calls are safe to retry)."""

    reason = "STORAGE_FULL"


class HistoryCompacted(UnsError):
    """The resume cursor is older than retained history; resync from the given sequence."""

    reason = "HISTORY_COMPACTED"


class TooManyStreams(UnsError):
    """Too many concurrent WatchEvents streams for this principal; close one and retry."""

    reason = "TOO_MANY_STREAMS"


class RateLimited(UnsError):
    """The request budget is spent; retry after the delay the RetryInfo detail gives."""

    reason = "RATE_LIMITED"

    def __init__(
        self,
        message: str | None = None,
        *,
        retry_delay_seconds: float,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.retry_delay_seconds = retry_delay_seconds


class ShuttingDown(UnsError):
    """The server is shutting down; reconnect (to any replica) and resume."""

    reason = "SHUTTING_DOWN"


class NotWithdrawable(UnsError):
    """The obligation is already settled and cannot be withdrawn."""

    reason = "NOT_WITHDRAWABLE"
