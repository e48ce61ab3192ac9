"""The per-call envelope shared by every RPC: authenticate, check the role, and turn
every refusal into a rich status (``api.errors``). Servicer methods stay thin."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any, ParamSpec, Protocol, TypeVar

import grpc
from google.protobuf.message import DecodeError

from uns_server.api.errors import to_grpc_status
from uns_server.api.request_text import nul_fields
from uns_server.domain.enums import Role
from uns_server.domain.errors import (
    FieldViolation,
    Internal,
    InvalidRequest,
    StorageFull,
    StorageUnavailable,
    UnsError,
)
from uns_server.domain.fields import NUL_PROBLEM
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.availability import storage_full, storage_unavailable

log = logging.getLogger("uns.api")

Req = TypeVar("Req")
Resp = TypeVar("Resp")
P = ParamSpec("P")


class HasAuth(Protocol):
    auth: Authenticator


def _authorization(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode()
    return None


def _certificate_cn(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The common name of a client certificate the TLS layer verified (mTLS), if any."""
    for name in context.auth_context().get("x509_common_name") or ():
        return name.decode()
    return None


def credentials(context: grpc.aio.ServicerContext[Any, Any]) -> tuple[str | None, str | None]:
    """The call's (authorization metadata, verified client certificate common name)."""
    authorization = _authorization(context)
    # A certificate only counts without an API key, and reading the TLS auth context
    # builds a dict per call: skip it when a key came.
    certificate_cn = None if authorization else _certificate_cn(context)
    return authorization, certificate_cn


# The principal ``api.admission`` authenticated for this call (each call runs in its
# own task, so the value never reaches another call).
ADMITTED: ContextVar[Principal | None] = ContextVar("uns_admitted", default=None)


async def authenticate(self: HasAuth, context: grpc.aio.ServicerContext[Any, Any]) -> Principal:
    admitted = ADMITTED.get()
    if admitted is not None:
        return admitted
    return await self.auth.authenticate(*credentials(context))


def _as_uns_error(exc: Exception) -> UnsError | None:
    if isinstance(exc, UnsError):
        return exc
    if storage_full(exc):  # the database logged where, and the space left, once
        log.warning("storage full: %s", type(exc).__name__)
        return StorageFull()
    if storage_unavailable(exc):
        log.warning("storage unavailable: %s", type(exc).__name__)
        return StorageUnavailable()
    return None


def refusal(exc: Exception) -> UnsError:
    """The error to answer with. Anything unexpected becomes INTERNAL with a reference,
    never the exception's text (which may hold SQL and its parameters)."""
    error = _as_uns_error(exc)
    if error is not None:
        return error
    reference = uuid.uuid4().hex[:12]
    log.error(
        "unexpected error (reference %s)",
        reference,
        exc_info=exc,
        extra={"error_reference": reference},
    )
    return Internal(f"internal error (reference {reference})", metadata={"reference": reference})


S = TypeVar("S", bound=HasAuth)
GUARDED_PREFIX = "/uns.v1."


class Undecodable:
    """A request refused before its handler reads it (see ``decode_guard``): its bytes
    do not parse as the RPC's message, or one of its strings holds NUL."""

    def __init__(self, problem: str, nul_fields: list[str] | None = None) -> None:
        self.problem = problem
        self.nul_fields = nul_fields or []

    def error(self) -> InvalidRequest:
        if self.nul_fields:
            fields = ",".join(self.nul_fields)
            return InvalidRequest(
                f"{self.nul_fields[0]}: {NUL_PROBLEM}",
                metadata={"fields": fields},
                violations=[FieldViolation(f, NUL_PROBLEM) for f in self.nul_fields],
            )
        description = "is not a valid protobuf message of this RPC's request type"
        return InvalidRequest(
            f"request: {description} (malformed wire data, invalid UTF-8 in a string, or "
            "nesting beyond the protobuf recursion limit)",
            metadata={"fields": "request"},
            violations=[FieldViolation("request", description)],
        )


def _guarded(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(raw: bytes) -> Any:
        try:
            message = deserialize(raw)
        except DecodeError as exc:
            return Undecodable(str(exc))
        fields = nul_fields(raw, message)
        if fields:
            return Undecodable("NUL in a string", fields)
        return message

    return decode


def decode_guard(
    method: str, handler: grpc.RpcMethodHandler[Any, Any]
) -> grpc.RpcMethodHandler[Any, Any]:
    """Requests that do not parse, or hold a NUL character in a string
    (``api.request_text``), reach the servicer as ``Undecodable`` and are refused with
    INVALID_REQUEST naming the fields (after authentication and the role check), instead
    of grpc answering UNKNOWN with the parser's exception text or the database refusing
    the text. Covers the ``uns.v1`` services;
    applied once per method (``api.wrapping``)."""
    if (
        handler.request_streaming
        or handler.request_deserializer is None
        or not method.startswith(GUARDED_PREFIX)
    ):
        return handler
    guarded: grpc.RpcMethodHandler[Any, Any] = handler._replace(  # type: ignore[attr-defined]
        request_deserializer=_guarded(handler.request_deserializer)
    )
    return guarded


def _refuse_undecodable(request: object) -> None:
    if isinstance(request, Undecodable):
        log.debug("undecodable request refused: %s", request.problem)
        raise request.error()


def unary(
    *roles: Role,
) -> Callable[
    [Callable[[S, Req, grpc.aio.ServicerContext[Any, Any], Principal], Awaitable[Resp]]],
    Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
]:
    def decorate(
        fn: Callable[[S, Req, grpc.aio.ServicerContext[Any, Any], Principal], Awaitable[Resp]],
    ) -> Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
        @functools.wraps(fn)
        async def wrapper(
            self: S, request: Req, context: grpc.aio.ServicerContext[Any, Any]
        ) -> Resp:
            try:
                principal = await authenticate(self, context)
                principal.require(*roles)
                _refuse_undecodable(request)
                return await fn(self, request, context, principal)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await context.abort_with_status(to_grpc_status(refusal(exc)))
                raise AssertionError("abort_with_status returned") from exc

        return wrapper

    return decorate


def streaming(
    *roles: Role,
) -> Callable[
    [Callable[[S, Req, grpc.aio.ServicerContext[Any, Any], Principal], AsyncIterator[Resp]]],
    Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]],
]:
    def decorate(
        fn: Callable[[S, Req, grpc.aio.ServicerContext[Any, Any], Principal], AsyncIterator[Resp]],
    ) -> Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]:
        @functools.wraps(fn)
        async def wrapper(
            self: S, request: Req, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Resp]:
            try:
                principal = await authenticate(self, context)
                principal.require(*roles)
                _refuse_undecodable(request)
                async for item in fn(self, request, context, principal):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await context.abort_with_status(to_grpc_status(refusal(exc)))

        return wrapper

    return decorate
