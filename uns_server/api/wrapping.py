"""Per-method handler wrappers applied once, when services register, not per call.

grpc.aio runs server interceptors on every call: a coroutine per interceptor, a
``HandlerCallDetails``, and a new method handler built by each of ours. Our wrappers
only depend on the method, so ``WrappingRegistrar`` stands in for the server in the
generated ``add_*_to_server`` functions (and in reflection's) and wraps each handler
the first time it is seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:  # generic in grpc-stubs only
    Handler = grpc.RpcMethodHandler[Any, Any]
    # (method, handler) -> handler: ``tracing.traced(tracer)``, ``handlers.decode_guard``.
    Wrapper = Callable[[str, Handler], Handler]


class WrappingRegistrar:
    """Pass it where a ``grpc.aio.Server`` registers handlers; ``wrappers`` apply in
    order, the first one outermost (as an interceptor list)."""

    def __init__(self, server: grpc.aio.Server, wrappers: Iterable[Wrapper]) -> None:
        self._server = server
        self._wrappers = tuple(reversed(tuple(wrappers)))

    def wrap(self, method: str, handler: Handler) -> Handler:
        for wrapper in self._wrappers:
            handler = wrapper(method, handler)
        return handler

    def add_generic_rpc_handlers(self, generic_handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_WrappedGeneric(handler, self.wrap) for handler in generic_handlers)
        )

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, Handler]
    ) -> None:
        self._server.add_registered_method_handlers(
            service_name,
            {
                name: self.wrap(f"/{service_name}/{name}", handler)
                for name, handler in method_handlers.items()
            },
        )


class _WrappedGeneric(grpc.GenericRpcHandler):
    """A generic handler is asked per call; its answer for a method is wrapped once."""

    def __init__(self, inner: grpc.GenericRpcHandler, wrap: Wrapper) -> None:
        self._inner = inner
        self._wrap = wrap
        self._wrapped: dict[str, tuple[Any, Handler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        method: str = handler_call_details.method
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped
