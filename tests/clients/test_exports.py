"""The public API of ``uns_clients``, pinned: a name added or removed here is an API change.

Like temporalio's ``test_client_exports``: everything public is importable from the package
root, nothing leaks from the private modules' imports, and every export is defined in
``uns_clients`` itself.
"""

from __future__ import annotations

import uns_clients

EXPECTED_EXPORTS = [
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
    "NotDeadLettered",
    "NotWithdrawable",
    "NotFound",
    "PermissionDenied",
    "PolicyOverride",
    "RateLimited",
    "NoPolicy",
    "RecipientInUse",
    "ReplayBlocked",
    "ReservedMetadataKey",
    "SendFields",
    "StorageFull",
    "TooManyStreams",
    "TypeNotAllowed",
    "TOLERANCE_SECONDS_DEFAULT",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UnknownChannel",
    "UnsError",
    "WebhookVerificationError",
    "verify_webhook",
]

# Imports of the private modules that must not become part of the public surface.
EXPECTED_NOT_EXPORTED = [
    "asyncio",
    "grpc",
    "pb",
    "pb_grpc",
    "t",
    "tenacity",
    "AsyncRetrying",
    "Retrying",
    "error_from_rpc",
    "backoff_seconds",
    "annotations",
]

ERRORS = [
    "AckConflict",
    "AckDeadlinePassed",
    "AckNotPending",
    "DeadlineExceeded",
    "HistoryCompacted",
    "IdempotencyConflict",
    "Internal",
    "InvalidRequest",
    "NotDeadLettered",
    "NotWithdrawable",
    "NotFound",
    "PermissionDenied",
    "PolicyOverride",
    "RateLimited",
    "ReplayBlocked",
    "ReservedMetadataKey",
    "StorageFull",
    "TooManyStreams",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UnknownChannel",
]


def test_all_matches_expected() -> None:
    assert sorted(uns_clients.__all__) == sorted(EXPECTED_EXPORTS)


def test_every_export_exists_and_is_defined_in_the_package() -> None:
    missing = [name for name in EXPECTED_EXPORTS if not hasattr(uns_clients, name)]
    assert not missing
    for name in EXPECTED_EXPORTS:
        module = getattr(getattr(uns_clients, name), "__module__", "uns_clients")
        assert module.startswith("uns_clients"), (name, module)


def test_public_names_are_exactly_the_exports() -> None:
    public = {
        name
        for name in vars(uns_clients)
        if not name.startswith("_") and name != "webhooks"  # the submodule itself
    }
    assert public == set(EXPECTED_EXPORTS)
    leaked = [name for name in EXPECTED_NOT_EXPORTED if hasattr(uns_clients, name)]
    assert not leaked


def test_errors_share_one_base() -> None:
    for name in ERRORS:
        cls = getattr(uns_clients, name)
        assert issubclass(cls, uns_clients.UnsError) and cls.__doc__
    assert issubclass(uns_clients.UnsError, Exception)
