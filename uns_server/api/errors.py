"""The one table from domain errors to gRPC status, and the rich-status builder.

Every non-OK answer the service produces carries exactly one ``google.rpc.ErrorInfo``
(domain ``uns.v1``) and, for field problems, a ``google.rpc.BadRequest``; RATE_LIMITED
also carries a ``google.rpc.RetryInfo`` saying when to try again.
"""

from __future__ import annotations

from datetime import timedelta

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from uns_server.domain import errors as e

DOMAIN = "uns.v1"

STATUS_BY_ERROR: dict[type[e.UnsError], grpc.StatusCode] = {
    e.InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    e.ReservedMetadataKey: grpc.StatusCode.INVALID_ARGUMENT,
    e.PolicyOverride: grpc.StatusCode.INVALID_ARGUMENT,
    e.UnknownPolicyChannel: grpc.StatusCode.INVALID_ARGUMENT,
    e.IdempotencyConflict: grpc.StatusCode.ALREADY_EXISTS,
    e.NotFound: grpc.StatusCode.NOT_FOUND,
    e.AckNotPending: grpc.StatusCode.FAILED_PRECONDITION,
    e.AckConflict: grpc.StatusCode.ABORTED,
    e.AckDeadlinePassed: grpc.StatusCode.FAILED_PRECONDITION,
    e.NotDeadLettered: grpc.StatusCode.FAILED_PRECONDITION,
    e.ReplayBlocked: grpc.StatusCode.FAILED_PRECONDITION,
    e.RecipientInUse: grpc.StatusCode.FAILED_PRECONDITION,
    e.NotWithdrawable: grpc.StatusCode.FAILED_PRECONDITION,
    e.NoPolicy: grpc.StatusCode.FAILED_PRECONDITION,
    e.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    e.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    e.TypeNotAllowed: grpc.StatusCode.PERMISSION_DENIED,
    e.Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
    e.StorageUnavailable: grpc.StatusCode.UNAVAILABLE,
    e.StorageFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    e.Internal: grpc.StatusCode.INTERNAL,
    e.HistoryCompacted: grpc.StatusCode.OUT_OF_RANGE,
    e.ShuttingDown: grpc.StatusCode.UNAVAILABLE,
    e.TooManyStreams: grpc.StatusCode.RESOURCE_EXHAUSTED,
    e.RateLimited: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def status_code(error: e.UnsError) -> grpc.StatusCode:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return grpc.StatusCode.INTERNAL


def to_grpc_status(error: e.UnsError) -> grpc.Status:
    result: grpc.Status = rpc_status.to_status(to_status_message(error))
    return result


def to_status_message(error: e.UnsError) -> status_pb2.Status:
    """The ``google.rpc.Status`` of ``error``: what a call refused with it carries, and
    what a failed item of a batch answers."""
    code = status_code(error)
    details = []
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=error.metadata)
    details.append(_pack(info))
    if error.violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in error.violations
            ]
        )
        details.append(_pack(bad))
    if isinstance(error, e.RateLimited):
        delay = duration_pb2.Duration()
        delay.FromTimedelta(timedelta(seconds=error.retry_delay_seconds))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    return status_pb2.Status(code=_code_value(code), message=error.message, details=details)


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _code_value(code: grpc.StatusCode) -> int:
    value = code.value[0]
    assert isinstance(value, int)
    assert code_pb2.Code.Name(value)  # the google.rpc code enum agrees with grpc's
    return value
