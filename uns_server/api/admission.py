"""Load shedding at the door of every ``uns.v1`` call (docs/deployment.md).

Before a servicer runs, in this order:

1. **Concurrency**: at most ``max_concurrent_rpcs`` unary calls run at once across the
   server; one more is refused at once. (WatchEvents streams are long-lived and have
   their own caps, per principal and server-wide, in ``services.watch``.)
2. **Authentication**, with the client's address: an address whose key lookups keep
   finding nothing is refused before the database is read again, so unknown keys
   cannot force unbounded database reads (``services.auth``; keys from the key file
   and cached lookups cost no read and are never refused this way).
3. **The principal's calls in progress**: at most ``max_concurrent_rpcs_per_principal``
   unary calls of one principal run at once, so one tenant's slow calls (a send that
   waits for its first attempt) cannot hold every server-wide slot.
4. **The principal's request budget** (``services.rate_limits``).

Every refusal is RESOURCE_EXHAUSTED with ErrorInfo reason ``RATE_LIMITED`` (metadata
``limit`` says which one) and a ``google.rpc.RetryInfo``: clients back off and retry.
The principal authenticated here is handed to the servicer (``handlers.ADMITTED``), so
a call is authenticated once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from uns_server.api.errors import to_grpc_status
from uns_server.api.front import client_address
from uns_server.api.handlers import ADMITTED, GUARDED_PREFIX, credentials
from uns_server.domain.errors import RateLimited, Unauthenticated
from uns_server.observability.metrics import Metrics
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.rate_limits import TokenBuckets

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Ctx = grpc.aio.ServicerContext[Any, Any]

# How long a call shed for concurrency is told to wait: in-flight calls take tens of
# milliseconds, so a slot is free again well within it.
CONCURRENCY_RETRY_SECONDS = 0.2
# How long a principal at its own cap is told to wait: the calls that must end first are
# its own, and the ones that hold a slot long (wait_for_first_attempt) take seconds.
PRINCIPAL_CONCURRENCY_RETRY_SECONDS = 1.0
FORWARDED_PEER = "uns-http-peer"  # set by uns_server.http.connect
# Calls that charge the principal's budget in the servicer (``over_budget``), once for
# all their items, not one token at the door: a batch is accepted whole or refused whole.
CHARGED_PER_ITEM = frozenset({"/uns.v1.NotificationService/BatchSendNotifications"})


def peer_address(peer: str) -> str:
    """The client's address without its port: ``ipv4:10.0.0.1:5000`` -> ``ipv4:10.0.0.1``
    (a connection relayed by the gRPC port's front: the client's, ``api.front``)."""
    relayed = client_address(peer)
    if relayed is not None:
        return relayed
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return f"{kind}:{rest.rpartition(':')[0]}"
    return peer  # unix sockets and the like: the whole string


class CallAdmission:
    def __init__(
        self,
        authenticator: Authenticator,
        principals: TokenBuckets,
        max_concurrent_rpcs: int,
        metrics: Metrics | None = None,
        max_concurrent_rpcs_per_principal: int | None = None,
    ) -> None:
        """``max_concurrent_rpcs_per_principal`` None: the server-wide cap alone."""
        self._auth = authenticator
        self._principals = principals
        self._metrics = metrics or Metrics.noop()
        self._max_concurrent = max_concurrent_rpcs
        self._max_per_principal = max_concurrent_rpcs_per_principal or max_concurrent_rpcs
        self.in_flight = 0
        # Unary calls in progress by principal (only principals with one or more).
        self.in_flight_by_principal: dict[str, int] = {}
        self._forwarding_peers = False

    def trust_forwarded_peer(self) -> None:
        """Calls from a unix socket (JSON over HTTP's private bridge) are charged to the
        client address in their ``uns-http-peer`` metadata: one HTTP client's failed key
        lookups must not spend every HTTP client's budget. Only when the public port is
        not itself a unix socket."""
        self._forwarding_peers = True

    def wrap(self, method: str, handler: Handler) -> Handler:
        """A ``WrappingRegistrar`` wrapper: ``uns.v1`` unary and server-streaming calls."""
        if not method.startswith(GUARDED_PREFIX) or handler.request_streaming:
            return handler
        if handler.response_streaming:
            wrapped: Handler = handler._replace(  # type: ignore[attr-defined]
                unary_stream=self._streaming(handler.unary_stream)
            )
        else:
            wrapped = handler._replace(  # type: ignore[attr-defined]
                unary_unary=self._unary(handler.unary_unary, charge=method not in CHARGED_PER_ITEM)
            )
        return wrapped

    def _unary(self, inner: Any, *, charge: bool = True) -> Any:
        async def unary(request: Any, context: Ctx) -> Any:
            if self.in_flight >= self._max_concurrent:
                await self._abort(
                    context,
                    RateLimited(
                        f"the server is at its limit of {self._max_concurrent} concurrent "
                        "calls; retry after the RetryInfo delay",
                        retry_delay_seconds=CONCURRENCY_RETRY_SECONDS,
                        metadata={"limit": "concurrent_rpcs"},
                    ),
                )
            self.in_flight += 1
            principal = None
            try:
                principal = await self._admit(context, charge=charge, hold=True)
                return await inner(request, context)
            finally:
                self.in_flight -= 1
                if principal is not None:
                    self._release(principal.name)

        return unary

    def _streaming(self, inner: Any) -> Any:
        async def streaming(request: Any, context: Ctx) -> AsyncIterator[Any]:
            await self._admit(context)
            async for item in inner(request, context):
                yield item

        return streaming

    def _hold(self, name: str) -> bool:
        """Takes one of ``name``'s call slots; False when it holds them all."""
        count = self.in_flight_by_principal.get(name, 0)
        if count >= self._max_per_principal:
            return False
        self.in_flight_by_principal[name] = count + 1
        return True

    def _release(self, name: str) -> None:
        left = self.in_flight_by_principal.get(name, 1) - 1
        if left > 0:
            self.in_flight_by_principal[name] = left
        else:
            self.in_flight_by_principal.pop(name, None)

    def _principal_full(self, name: str) -> RateLimited:
        return RateLimited(
            f"{name} has {self._max_per_principal} calls in progress, its limit; retry "
            "after the RetryInfo delay",
            retry_delay_seconds=PRINCIPAL_CONCURRENCY_RETRY_SECONDS,
            metadata={"limit": "principal_concurrent_rpcs", "principal": name},
        )

    async def _admit(
        self, context: Ctx, *, charge: bool = True, hold: bool = False
    ) -> Principal | None:
        """Authenticates, takes one of the principal's call slots (``hold``: the
        caller releases it) and charges its budget; aborts the call on a refusal (a
        refused call holds no slot and spends no budget on the slot's refusal).
        Anything else that goes wrong (a database fault) is left to the servicer,
        which authenticates again and reports it (None, no slot taken)."""
        address = peer_address(context.peer() or "")
        if self._forwarding_peers and address.startswith("unix:"):
            for key, value in context.invocation_metadata() or ():
                if key == FORWARDED_PEER:
                    address = value if isinstance(value, str) else value.decode()
        try:
            principal: Principal = await self._auth.authenticate(
                *credentials(context), address=address
            )
        except (Unauthenticated, RateLimited) as exc:
            await self._abort(context, exc)
        except Exception:
            return None
        if hold and not self._hold(principal.name):
            await self._abort(context, self._principal_full(principal.name))
        try:
            refusal = await self.over_budget(principal.name) if charge else None
            if refusal is not None:
                await self._abort(context, refusal)
        except BaseException:
            if hold:
                self._release(principal.name)
            raise
        ADMITTED.set(principal)
        return principal

    async def over_budget(self, principal: str, requests: int = 1) -> RateLimited | None:
        """Takes ``requests`` requests from ``principal``'s budget, all or none (a batch
        is charged as a whole): None, or the refusal if too few are left (nothing
        taken)."""
        delay = await self._principals.take(principal, requests)
        if delay is None:
            return None
        self._metrics.shed("principal")
        metadata = {"limit": "principal", "principal": principal}
        if requests > 1:
            metadata["requests"] = str(requests)
        return RateLimited(
            f"{principal} is over its request budget; retry after the RetryInfo delay",
            retry_delay_seconds=delay,
            metadata=metadata,
        )

    async def _abort(self, context: Ctx, error: RateLimited | Unauthenticated) -> None:
        if isinstance(error, RateLimited) and error.metadata.get("limit") != "principal":
            self._metrics.shed(error.metadata.get("limit", ""))  # over_budget counted it
        await context.abort_with_status(to_grpc_status(error))
