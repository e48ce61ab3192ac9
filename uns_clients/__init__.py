"""UNS Python client: typed async and blocking clients for ``uns.v1.NotificationService``
(and maintenance windows, ``uns.v1.MaintenanceService``: ``put_maintenance_window``...).

::

    from uns_clients import AsyncClient, IdempotencyConflict

    async with AsyncClient("127.0.0.1:50051", api_key=key) as uns:
        sent = await uns.send(notification_type="disk.full", intent="WARNING",
                              title="Disk almost full", message="92% used", source="monitor")
        notification = await uns.get(sent.notification_id)

Calls return the generated messages of the ``uns`` package (``uns.v1.types_pb2``,
``uns.v1.notification_service_pb2``) and raise subclasses of ``UnsError``, one per
``ErrorInfo`` reason. Everything public is importable from here; the modules with a
leading underscore are private.
"""

from uns_clients._blocking_client import Client
from uns_clients._client import AsyncClient
from uns_clients._config import ClientConfig
from uns_clients._convert import SendFields
from uns_clients._errors import (
    AckConflict,
    AckDeadlinePassed,
    AckNotPending,
    DeadlineExceeded,
    HistoryCompacted,
    IdempotencyConflict,
    Internal,
    InvalidRequest,
    NoPolicy,
    NotDeadLettered,
    NotFound,
    NotWithdrawable,
    PermissionDenied,
    PolicyOverride,
    RateLimited,
    RecipientInUse,
    ReplayBlocked,
    ReservedMetadataKey,
    StorageFull,
    TooManyStreams,
    TypeNotAllowed,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    UnknownChannel,
    UnsError,
)
from uns_clients._people import AsyncPeople
from uns_clients._watch import BlockingEventStream, EventStream
from uns_clients.webhooks import (
    TOLERANCE_SECONDS_DEFAULT,
    WebhookVerificationError,
    verify_webhook,
)

__all__ = [
    "TOLERANCE_SECONDS_DEFAULT",
    "AckConflict",
    "AckDeadlinePassed",
    "AckNotPending",
    "AsyncClient",
    "AsyncPeople",
    "BlockingEventStream",
    "Client",
    "ClientConfig",
    "DeadlineExceeded",
    "EventStream",
    "HistoryCompacted",
    "IdempotencyConflict",
    "Internal",
    "InvalidRequest",
    "NoPolicy",
    "NotDeadLettered",
    "NotFound",
    "NotWithdrawable",
    "PermissionDenied",
    "PolicyOverride",
    "RateLimited",
    "RecipientInUse",
    "ReplayBlocked",
    "ReservedMetadataKey",
    "SendFields",
    "StorageFull",
    "TooManyStreams",
    "TypeNotAllowed",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UnknownChannel",
    "UnsError",
    "WebhookVerificationError",
    "verify_webhook",
]
