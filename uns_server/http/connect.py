"""JSON over HTTP: the Connect protocol's unary JSON shape, and WatchEvents as
Server-Sent Events, on the HTTP listener, for every method of every ``uns.v1`` service.

``POST /uns.v1.NotificationService/SendNotification`` with ``Content-Type:
application/json`` (or ``application/proto``) and ``authorization: Bearer KEY`` calls the
gRPC method of that name on this process's own gRPC server, over a private loopback
channel (a unix socket in a directory only this user can enter), with the key forwarded
as metadata: authentication, roles, tenancy, rate limits, validation and idempotency are
the gRPC path itself, not a copy of it. Requests and answers are converted with
``google.protobuf.json_format`` (protobuf's JSON mapping, as Connect specifies), whole
numbers written as integers (``connect_wire.message_json``).

A refusal is Connect's error JSON, a ``google.rpc.Status`` whose details are the gRPC
status details (ErrorInfo, BadRequest, RetryInfo) as ``{type, value, debug}``, ``debug``
being the detail as JSON so that a curl user reads the reason. The HTTP status follows
Connect's table except FAILED_PRECONDITION, which is 412 (Connect's clients read the code
from the body). What the bridge refuses itself (wrong content type, malformed JSON, an
unknown field, a body over the limit or too slow) is 4xx with ErrorInfo
``INVALID_REQUEST``; a gRPC error that came without details (one of gRPC's own) gets an
ErrorInfo whose reason is the code's name.

``GET /uns.v1.NotificationService/WatchEvents?kinds=...&after_sequence=N`` with
``Accept: text/event-stream`` proxies the gRPC stream: each event is ``event: event``
with ``id:`` its sequence, each heartbeat ``event: heartbeat`` with ``id:`` the
high-water sequence, so a browser's ``Last-Event-ID`` (used as ``after_sequence``)
resumes exactly as a gRPC client would; a refusal ends the stream with ``event: error``.
The routes come from the descriptor set (``uns_server/api/uns_v1.binpb``), so a new
method is served once the protos are regenerated.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2

from uns_server.http.connect_wire import (
    DOMAIN,
    Refusal,
    message_json,
    parse_json,
    parse_query,
    sse_frame,
    too_large,
)
from uns_server.http.server import DEADLINE_KEY

log = logging.getLogger("uns.http")

PACKAGE = "uns.v1"
DESCRIPTOR_SET = Path(__file__).parent.parent / "api" / "uns_v1.binpb"
OPENAPI = Path(__file__).parent / "openapi.json"
# The client's address, for the per-address budget of failed key lookups; the gRPC
# server believes it only from the bridge's own socket (``api.admission``).
PEER_HEADER = "uns-http-peer"
JSON = "application/json"
PROTO = "application/proto"
# Bodies and answers larger than this are converted on a worker thread, not the loop.
OFF_LOOP_BYTES = 64 * 1024


@dataclass(frozen=True)
class Method:
    path: str  # /uns.v1.Service/Method
    request: type[Message]
    response: type[Message]
    server_streaming: bool


def methods(descriptor_set: Path = DESCRIPTOR_SET) -> list[Method]:
    """Every method of every ``uns.v1`` service in the descriptor set, with the
    generated message classes (their modules imported, so a new proto file counts)."""
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes()).file
    pool = descriptor_pool.Default()
    result = []
    for file in files:
        if file.package != PACKAGE:
            continue
        importlib.import_module(file.name.removesuffix(".proto").replace("/", ".") + "_pb2")
        for service in file.service:
            for method in service.method:
                if method.client_streaming:
                    continue
                result.append(
                    Method(
                        f"/{file.package}.{service.name}/{method.name}",
                        _message_class(pool, method.input_type),
                        _message_class(pool, method.output_type),
                        method.server_streaming,
                    )
                )
    return result


def _wrong_method(allowed: str) -> Callable[[web.Request], Any]:
    async def handler(request: web.Request) -> web.StreamResponse:
        refusal = Refusal.invalid(
            f"{request.method} is not allowed here: use {allowed}", field="method", http_status=405
        )
        refusal.headers["Allow"] = allowed
        return refusal.response()

    return handler


def _to_json(cls: type[Message], serialized: bytes) -> str:
    return json.dumps(message_json(cls.FromString(serialized)))


def _message_class(pool: descriptor_pool.DescriptorPool, type_name: str) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName(type_name.lstrip("."))
    )
    return cls


class Bridge:
    """The JSON (and SSE) routes over a loopback gRPC channel to ``target``."""

    def __init__(
        self,
        target: Callable[[], str],
        max_message_bytes: int,
        timeout_seconds: float,
        descriptor_set: Path = DESCRIPTOR_SET,
    ) -> None:
        self._target = target
        self._max_message_bytes = max_message_bytes
        self._timeout = timeout_seconds
        self._methods = methods(descriptor_set)
        self._channel: grpc.aio.Channel | None = None

    def routes(self) -> list[web.RouteDef]:
        result = [web.get("/openapi.json", self._openapi)]
        for method in self._methods:
            if method.server_streaming:
                result.append(web.get(method.path, self._streaming(method)))
            else:
                result.append(web.post(method.path, self._unary(method)))
            allowed = "GET" if method.server_streaming else "POST"
            result.append(web.route("*", method.path, _wrong_method(allowed)))
        # Any other method of the package: Connect's unimplemented (404), as JSON.
        result.append(web.route("*", "/" + PACKAGE + ".{service}/{method}", self._unimplemented))
        return result

    async def _unimplemented(self, request: web.Request) -> web.StreamResponse:
        return Refusal(
            grpc.StatusCode.UNIMPLEMENTED,
            f"no method {request.path[1:]}",
            [error_details_pb2.ErrorInfo(reason="UNIMPLEMENTED", domain=DOMAIN)],
            http_status=404,
        ).response()

    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                self._target(),
                options=[
                    ("grpc.max_send_message_length", self._max_message_bytes),
                    ("grpc.max_receive_message_length", -1),
                ],
            )
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(OPENAPI, headers={"Content-Type": JSON})

    def _metadata(self, request: web.Request) -> list[tuple[str, str]]:
        metadata = [(PEER_HEADER, f"ip:{request.remote or ''}")]
        authorization = request.headers.get("Authorization")
        if authorization is not None:
            metadata.append(("authorization", authorization))
        return metadata

    def _deadline(self, request: web.Request) -> float:
        timeout = self._timeout * 0.9  # answered before the HTTP request's own limit
        header = request.headers.get("Connect-Timeout-Ms", "")
        if header.isdigit() and 0 < len(header) <= 10:
            timeout = min(timeout, int(header) / 1000)
        return timeout

    def _unary(self, method: Method) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.StreamResponse:
            try:
                return await self._call(method, request)
            except Refusal as refusal:
                return refusal.response()

        return handler

    async def _call(self, method: Method, request: web.Request) -> web.StreamResponse:
        content_type = request.content_type
        if content_type not in (JSON, PROTO):
            raise Refusal.invalid(
                f"Content-Type must be {JSON} or {PROTO}, not {content_type or 'none'}",
                field="content-type",
                http_status=415,
            )
        body = await self._body(request)
        message = method.request()
        if content_type == JSON:
            if len(body) > OFF_LOOP_BYTES:  # a 1 MiB document parses for tens of ms
                await asyncio.to_thread(parse_json, body, message)
            else:
                parse_json(body, message)
        else:
            try:
                message.ParseFromString(body)
            except DecodeError as exc:
                raise Refusal.invalid(f"the body is not a {message.DESCRIPTOR.name}") from exc
        answer = await self.invoke(method.path, message, request)
        if content_type == PROTO:
            return web.Response(body=answer, content_type=PROTO)
        if len(answer) > OFF_LOOP_BYTES:
            text = await asyncio.to_thread(_to_json, method.response, answer)
        else:
            text = _to_json(method.response, answer)
        return web.Response(text=text, content_type=JSON)

    async def invoke(self, path: str, message: Message, request: web.Request) -> bytes:
        """Calls unary method ``path`` with ``request``'s key, as the JSON route would:
        the serialized answer, or ``Refusal`` (for handlers built on the gRPC methods,
        ``http.alertmanager``)."""
        call: Any = self.channel().unary_unary(path)
        try:
            answer: bytes = await call(
                message.SerializeToString(),
                metadata=self._metadata(request),
                timeout=self._deadline(request),
            )
        except grpc.aio.AioRpcError as exc:
            raise Refusal.from_rpc(exc) from exc
        return answer

    async def body(self, request: web.Request) -> bytes:
        """The request's body, within the gRPC message limit (413 past it)."""
        return await self._body(request)

    async def _body(self, request: web.Request) -> bytes:
        limit = self._max_message_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(limit)
        # A body that never arrives meets the request's deadline, which answers 408
        # (``http.server``).
        chunks, size = [], 0
        async for chunk in request.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    def _streaming(self, method: Method) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.StreamResponse:
            try:
                return await self._stream(method, request)
            except Refusal as refusal:
                return refusal.response()

        return handler

    async def _stream(self, method: Method, request: web.Request) -> web.StreamResponse:
        message = method.request()
        parse_query(request, message)
        last_event_id = request.headers.get("Last-Event-ID", "").strip()
        if last_event_id:
            if not last_event_id.isdigit() or len(last_event_id) > 19:
                raise Refusal.invalid("Last-Event-ID must be a sequence", field="last-event-id")
            field = message.DESCRIPTOR.fields_by_name.get("after_sequence")
            if field is not None:
                setattr(message, "after_sequence", int(last_event_id))  # noqa: B010
        stream: Any = self.channel().unary_stream(method.path)
        call: Any = stream(message.SerializeToString(), metadata=self._metadata(request))
        # Nothing is sent before the stream's first answer: a refusal (authentication,
        # a bad filter, history compacted) is then an ordinary JSON error.
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as exc:
            raise Refusal.from_rpc(exc) from exc
        if first is grpc.aio.EOF:
            return web.Response(status=204)
        request[DEADLINE_KEY].reschedule(None)  # a stream outlives a request's time
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        try:
            item: Any = first
            while item is not grpc.aio.EOF:
                await response.write(sse_frame(method.response.FromString(item)))
                item = await call.read()
        except grpc.aio.AioRpcError as exc:
            payload = json.dumps(Refusal.from_rpc(exc).body(), separators=(",", ":"))
            await response.write(f"event: error\ndata: {payload}\n\n".encode())
        except ConnectionResetError:
            # The client closed the stream (a browser tab, a reconnecting subscriber):
            # how every stream ends, not a fault. The gRPC call is cancelled below.
            log.info("event stream closed by the client", extra={"path": request.path})
        finally:
            call.cancel()
        return response
