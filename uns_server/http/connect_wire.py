"""The Connect protocol's wire shapes for ``http.connect``: the error JSON (a
``google.rpc.Status`` with its details as ``{type, value, debug}``), the HTTP status of
each code, JSON bodies and query strings read into messages, Server-Sent Event frames,
and every message answered as JSON (``message_json``: whole numbers stay integers)."""

from __future__ import annotations

import base64
import json
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from uns_server.domain.fields import SURROGATE_PROBLEM, has_lone_surrogate

DOMAIN = "uns.v1"
# Whole doubles up to this magnitude are written as integers: every such double is an
# exact integer, and every JSON decoder reads one back as the same number.
EXACT_INTEGER_MAX = 2**53

# Connect's HTTP status per code, except FAILED_PRECONDITION (412, not 400).
HTTP_STATUS = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 412,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}
_DETAIL_TYPES: dict[str, type[Message]] = {
    t.DESCRIPTOR.full_name: t
    for t in (
        error_details_pb2.ErrorInfo,
        error_details_pb2.BadRequest,
        error_details_pb2.RetryInfo,
    )
}


class Refusal(Exception):
    """An answer with a Connect error body."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        details: list[Any] | None = None,
        http_status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.details = details or []
        self.http_status = http_status or HTTP_STATUS.get(code, 500)
        self.headers = headers or {}

    @classmethod
    def invalid(
        cls,
        message: str,
        field: str = "request",
        http_status: int = 400,
        description: str | None = None,
    ) -> Refusal:
        """INVALID_REQUEST naming ``field``; the violation says ``description`` (by
        default the message)."""
        info = error_details_pb2.ErrorInfo(
            reason="INVALID_REQUEST", domain=DOMAIN, metadata={"fields": field}
        )
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=field, description=description or message
                )
            ]
        )
        return cls(grpc.StatusCode.INVALID_ARGUMENT, message, [info, bad], http_status)

    @classmethod
    def from_rpc(cls, error: grpc.aio.AioRpcError) -> Refusal:
        code = error.code()
        details: list[Any] = []
        for key, value in error.trailing_metadata() or ():
            if key == "grpc-status-details-bin" and isinstance(value, bytes):
                details = list(status_pb2.Status.FromString(value).details)
        if not details:  # one of gRPC's own (deadline, message size, shutting down)
            details = [error_details_pb2.ErrorInfo(reason=code.name, domain=DOMAIN)]
        headers = {}
        for detail in details:
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                seconds = retry.retry_delay.seconds + (retry.retry_delay.nanos > 0)
                headers["Retry-After"] = str(max(1, seconds))
        return cls(code, error.details() or code.name, details, headers=headers)

    def body(self) -> dict[str, Any]:
        return {
            "code": self.code.name.lower(),
            "message": self.message,
            "details": [_detail(d) for d in self.details],
        }

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.http_status, headers=self.headers)


def _detail(detail: Any) -> dict[str, Any]:
    """An Any (or a message to pack) as Connect's ``{type, value, debug}``."""
    if isinstance(detail, Message) and detail.DESCRIPTOR.full_name != "google.protobuf.Any":
        type_name, value = detail.DESCRIPTOR.full_name, detail.SerializeToString()
        message: Message | None = detail
    else:
        type_name = detail.type_url.rpartition("/")[2]
        value = detail.value
        cls = _DETAIL_TYPES.get(type_name)
        message = cls.FromString(value) if cls is not None else None
    result: dict[str, Any] = {
        "type": type_name,
        "value": base64.b64encode(value).decode().rstrip("="),
    }
    if message is not None:
        result["debug"] = message_json(message)
    return result


def message_json(message: Message) -> dict[str, Any]:
    """``message`` in protobuf's JSON mapping, with whole numbers as integers.

    A ``google.protobuf.Struct`` (metadata, event payloads) holds every number as a
    double, which ``json_format`` writes as ``92.0``: a decoder reading into an integer
    (Go's ``encoding/json`` for an ``int`` field) refuses that. The proto3 JSON mapping
    lets a double be written ``92``, and JSON itself has one number type, so an
    integral value is written as the integer it is (other numbers are unchanged)."""
    result: dict[str, Any] = _integral(json_format.MessageToDict(message))
    return result


def _integral(value: Any) -> Any:
    if isinstance(value, float):
        if value.is_integer() and abs(value) <= EXACT_INTEGER_MAX:
            return int(value)
        return value
    if isinstance(value, dict):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


def sse_frame(message: Message) -> bytes:
    data = message_json(message)
    event_id = ""
    kind = "message"
    if "event" in data:
        kind = "event"
        event_id = str(data["event"].get("sequence", ""))
    elif "heartbeat" in data:
        kind = "heartbeat"
        event_id = str(data["heartbeat"].get("highWaterSequence", "0"))
    lines = [f"event: {kind}"]
    if event_id:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


def too_large(limit: int) -> Refusal:
    return Refusal.invalid(f"the body is larger than {limit} bytes", http_status=413)


def parse_json(body: bytes, message: Message) -> None:
    try:
        document = json.loads(body or b"{}")
    except (ValueError, RecursionError) as exc:
        raise Refusal.invalid("the body is not JSON") from exc
    if not isinstance(document, dict):
        raise Refusal.invalid("the body must be a JSON object")
    # A lone surrogate can only come from a \u escape (raw bytes must be UTF-8); protobuf
    # cannot hold it, and its JSON parser fails on one in an enum or a key with an error
    # that is not its own (SystemError).
    if b"\\u" in body:
        at = _surrogate_at(document, "")
        if at is not None:
            field = at or "request"
            raise Refusal.invalid(
                f"{field}: {SURROGATE_PROBLEM}", field=field, description=SURROGATE_PROBLEM
            )
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=False)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise Refusal.invalid(_first_line(exc)) from exc


def _surrogate_at(value: Any, path: str) -> str | None:
    """The JSON path (as the caller named it) of the first string or key holding a
    lone surrogate, or None; a bad key names the object holding it."""
    if isinstance(value, str):
        return path if has_lone_surrogate(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if has_lone_surrogate(key):
                return path
            found = _surrogate_at(item, f"{path}.{key}" if path else key)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _surrogate_at(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def parse_query(request: web.Request, message: Message) -> None:
    """Query parameters as the request's fields (repeated ones repeated)."""
    document: dict[str, Any] = {}
    fields = message.DESCRIPTOR.fields_by_name
    by_json = {f.json_name: f for f in message.DESCRIPTOR.fields}
    for key in request.query:
        field: Any = fields.get(key) or by_json.get(key)
        if field is None:
            raise Refusal.invalid(f"unknown query parameter {key!r}", field=key)
        values = request.query.getall(key)
        if field.is_repeated:
            document[field.name] = values
        elif field.type == field.TYPE_BOOL:
            document[field.name] = values[-1].lower() in ("true", "1")
        else:
            document[field.name] = values[-1]
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=False)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise Refusal.invalid(_first_line(exc)) from exc


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or ["invalid request"])[0][:300]
