"""The per-call envelope shared by every RPC: authenticate, check the role, and turn
every refusal into a rich status (``api.errors``). Servicer methods stay thin."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ParamSpec, Protocol, TypeVar

import grpc
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from uns_server.api.errors import to_grpc_status
from uns_server.domain.enums import Role
from uns_server.domain.errors import StorageUnavailable, UnsError
from uns_server.services.auth import Authenticator, Principal

log = logging.getLogger("uns.api")

Req = TypeVar("Req")
Resp = TypeVar("Resp")
P = ParamSpec("P")

# Errors that mean "the database is unreachable right now": answer UNAVAILABLE so
# clients retry (SendNotification is idempotent), never INTERNAL.
_STORAGE_DOWN = (OperationalError, InterfaceError, PoolTimeout, ConnectionError, OSError)


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


async def authenticate(self: HasAuth, context: grpc.aio.ServicerContext[Any, Any]) -> Principal:
    return await self.auth.authenticate(_authorization(context), _certificate_cn(context))


def _as_uns_error(exc: Exception) -> UnsError | None:
    if isinstance(exc, UnsError):
        return exc
    if isinstance(exc, _STORAGE_DOWN) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        log.warning("storage unavailable: %s", type(exc).__name__)
        return StorageUnavailable()
    return None


S = TypeVar("S", bound=HasAuth)


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
                return await fn(self, request, context, principal)
            except Exception as exc:
                error = _as_uns_error(exc)
                if error is None:
                    raise
                await context.abort_with_status(to_grpc_status(error))
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
                async for item in fn(self, request, context, principal):
                    yield item
            except Exception as exc:
                error = _as_uns_error(exc)
                if error is None:
                    raise
                await context.abort_with_status(to_grpc_status(error))

        return wrapper

    return decorate
