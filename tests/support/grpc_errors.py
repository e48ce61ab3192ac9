"""Read the rich status (ErrorInfo, BadRequest, RetryInfo) out of a grpc.aio error."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2, status_pb2

GRPC_DETAILS_KEY = "grpc-status-details-bin"


@dataclass
class RichError:
    code: grpc.StatusCode
    message: str
    reason: str
    domain: str
    metadata: dict[str, str]
    violations: dict[str, str]
    retry_delay: float | None = None  # google.rpc.RetryInfo, seconds


def rich_error(err: grpc.aio.AioRpcError) -> RichError:
    status = status_pb2.Status()
    for key, value in err.trailing_metadata() or ():
        if key == GRPC_DETAILS_KEY:
            status.MergeFromString(value)
    rich = rich_status(status)
    assert rich.code == err.code()
    rich.message = err.details() or ""
    return rich


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def rich_status(status: status_pb2.Status) -> RichError:
    """The same, from a ``google.rpc.Status`` message (a failed batch item)."""
    info = error_details_pb2.ErrorInfo()
    bad = error_details_pb2.BadRequest()
    retry: float | None = None
    infos = 0
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            detail.Unpack(info)
            infos += 1
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            detail.Unpack(bad)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info_retry = error_details_pb2.RetryInfo()
            detail.Unpack(info_retry)
            retry = info_retry.retry_delay.ToTimedelta().total_seconds()
    assert infos == 1, f"expected exactly one ErrorInfo, got {infos}: {status}"
    return RichError(
        code=_CODES[status.code],
        message=status.message,
        reason=info.reason,
        domain=info.domain,
        metadata=dict(info.metadata),
        violations={v.field: v.description for v in bad.field_violations},
        retry_delay=retry,
    )
