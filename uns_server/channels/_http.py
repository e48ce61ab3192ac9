"""Shared HTTP plumbing for the webhook, Slack and PagerDuty adapters.

One place maps what can go wrong on the wire to a :class:`ChannelResult`, so the
adapters only decide what *their* provider's explicit acceptance looks like.

* Transport: connect errors and timeouts (waiting for a pooled connection included)
  are transient and prove the provider did not act; read/write errors, a dropped
  connection, a reply that is not HTTP and the total deadline are transient but the
  provider *may* have acted (``provider_effect_possible``). A malformed URL or a request
  we cannot even encode is permanent: retrying sends the same bytes.
* Status: 2xx goes back to the adapter for the body check; 408, 429 and 5xx are
  transient (with Retry-After when given); everything else, redirects included (we never
  follow them with a signed body), is permanent.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import math
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import yarl

from uns_server.channels._redact import LogRedaction, redact, scrub_result, secret_variants
from uns_server.channels.base import ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.http_transport import NOT_SENT, OutboundClient

MAX_RESPONSE_BYTES = 64 * 1024
ERROR_EXCERPT_CHARS = 200
_TRANSIENT_STATUSES = frozenset({408, 429})
# Statuses that prove the request was not processed (no duplicate risk on retry).
_NOT_PROCESSED_STATUSES = frozenset({408, 429, 503})


@dataclass(frozen=True)
class HttpReply:
    """A provider's answer: status, headers and at most ``MAX_RESPONSE_BYTES`` of body."""

    status: int
    headers: Mapping[str, str]  # case-insensitive: aiohttp's CIMultiDictProxy
    body: bytes
    # The adapter's secrets (``secret_variants``): masked in ``excerpt`` *before* it cuts
    # the body, since a secret cut in two is no longer found by ``scrub_result``.
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, or ``None`` when it is anything else."""
        try:
            value = json.loads(self.body)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def excerpt(self, limit: int = ERROR_EXCERPT_CHARS) -> str:
        """A short single-line rendering of the body, for error strings."""
        text = redact(self.body.decode("utf-8", errors="replace"), self.secrets)
        text = " ".join(text.split())
        return text if len(text) <= limit else text[:limit] + "..."


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); ``None`` if absent.

    A date in the past means "now" (0.0); garbage is ignored rather than guessed at.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT; a naive parse means "-0000"
            return None
        return max(0.0, when.timestamp() - now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def classify_http_response(reply: HttpReply, *, now: float) -> ChannelResult | None:
    """Classify a non-2xx reply; ``None`` for 2xx, whose body only the adapter can judge."""
    status = reply.status
    if 200 <= status < 300:
        return None
    metadata: dict[str, Any] = {
        "http_status": status,
        "provider_effect_possible": status >= 500 and status not in _NOT_PROCESSED_STATUSES,
    }
    detail = reply.excerpt()
    error = f"HTTP {status}" + (f": {detail}" if detail else "")
    if status in _TRANSIENT_STATUSES or status >= 500:
        retry_after = parse_retry_after(reply.headers.get("retry-after"), now=now)
        return ChannelResult.transient(
            error, retry_after_seconds=retry_after, metadata=metadata, throttled=status == 429
        )
    return ChannelResult.permanent(error, metadata=metadata)


def unexpected_success(reply: HttpReply, expected: str) -> ChannelResult:
    """A 2xx that is not the provider's documented acceptance: not delivered, not retried.

    Retrying would send the same request to an endpoint that answers it the same odd way;
    an operator has to look (wrong URL, a proxy or captive portal answering for the provider).
    """
    detail = reply.excerpt()
    return ChannelResult.permanent(
        f"unexpected response to HTTP {reply.status} (expected {expected})"
        + (f": {detail}" if detail else ""),
        metadata={"http_status": reply.status, "provider_effect_possible": True},
    )


# By what the failure proves. aiohttp's own messages hold the URL, which may be a
# credential, so results name only the error's type.
_TIMED_OUT = (TimeoutError,)  # ours (asyncio.timeout) and aiohttp's read timeouts
# A URL aiohttp cannot use, or a header it refuses to send (CR/LF: ValueError).
_UNSENDABLE = (aiohttp.InvalidURL, ValueError)


def classify_request_error(exc: BaseException) -> ChannelResult:
    """Map a failed request (no usable reply) to a result; never echoes URLs or headers
    (the host and port are named, never the path or the query)."""
    if isinstance(exc, NOT_SENT):
        return ChannelResult.transient(_not_sent(exc), metadata={"provider_effect_possible": False})
    if isinstance(exc, _TIMED_OUT):
        return ChannelResult.transient(
            "timed out waiting for the provider to answer",
            metadata={"provider_effect_possible": True},
        )
    if isinstance(exc, _UNSENDABLE):
        what = (
            "the URL is not usable"
            if isinstance(exc, aiohttp.InvalidURL)
            else "a header holds a character HTTP forbids"
        )
        return ChannelResult.permanent(
            f"request could not be sent: {what}", metadata={"provider_effect_possible": False}
        )
    # The connection dropped mid-request, or the reply was not HTTP.
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        text = "the provider closed the connection before answering"
    elif isinstance(exc, aiohttp.ClientResponseError | aiohttp.ClientPayloadError):
        text = "the provider's reply was not valid HTTP"
    else:
        text = "the connection broke during the request"
    return ChannelResult.transient(
        f"transport error: {text}", metadata={"provider_effect_possible": True}
    )


def _not_sent(exc: BaseException) -> str:
    """A sentence for a connection that was never made: "connection refused to
    127.0.0.1:9", not the exception's repr."""
    if not isinstance(exc, aiohttp.ClientConnectorError):
        return "could not connect: no connection to the provider in time"
    where = f"{exc.host}:{exc.port}"
    cause = exc.os_error
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"could not connect: TLS with {where} failed"
    if isinstance(cause, ConnectionRefusedError):
        return f"connection refused to {where}"
    if isinstance(cause, socket.gaierror):
        return f"could not connect: the name {exc.host} does not resolve"
    if isinstance(cause, TimeoutError):
        return f"could not connect: no connection to {where} in time"
    reason = os.strerror(cause.errno).lower() if cause.errno else "the connection failed"
    return f"could not connect to {where}: {reason}"


# A channel posts to the same few URLs all day; parsing one costs more than looking it
# up. URLs are immutable, so parsed ones are shared.
_parsed_url = functools.lru_cache(maxsize=1024)(yarl.URL)


@functools.lru_cache(maxsize=64)
def _timeouts(seconds: float) -> aiohttp.ClientTimeout:
    # Each phase gets the whole budget, and ``asyncio.timeout`` caps them together.
    # ``connect`` covers the wait for a pooled connection too; when it runs out aiohttp
    # says so (ConnectionTimeoutError), which proves nothing was sent.
    return aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)


async def post(
    client: OutboundClient,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    timeout_seconds: float,
) -> HttpReply | ChannelResult:
    """POST and read a bounded reply, or the classified failure.

    Per-phase timeouts alone would let a provider that trickles bytes hold a worker far
    longer; ``asyncio.timeout`` caps the whole call. Redirects are never followed.
    """
    try:
        async with asyncio.timeout(timeout_seconds):
            async with client.session().post(
                _parsed_url(url),
                data=content,
                headers=headers,
                timeout=_timeouts(timeout_seconds),
                allow_redirects=False,
            ) as response:
                body = bytearray()
                while len(body) < MAX_RESPONSE_BYTES:
                    chunk = await response.content.read(MAX_RESPONSE_BYTES - len(body))
                    if not chunk:
                        break
                    body += chunk
                return HttpReply(response.status, response.headers, bytes(body))
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        return classify_request_error(exc)


class HttpChannel:
    """Common shape of the HTTP adapters: shared client, secret scrubbing, idempotent close.

    Subclasses implement :meth:`_deliver`; everything it returns is scrubbed of
    ``secrets`` here, and the HTTP libraries' loggers are filtered for them while a
    request is in flight.
    """

    def __init__(
        self,
        name: str,
        client: OutboundClient,
        *,
        secrets: tuple[str, ...],
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self._client = client
        self._secrets = secret_variants(secrets)
        self._on_close = on_close
        self._log_redaction = LogRedaction(self._secrets)
        self._closed = False

    async def send(self, message: OutboundMessage) -> ChannelResult:
        return scrub_result(await self._deliver(message), self._secrets)

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        raise NotImplementedError

    async def update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """Show how the obligation ended on a sent message (``UpdatableChannel``)."""
        return scrub_result(await self._update(reference, settlement), self._secrets)

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        return ChannelResult.permanent(f"channel {self.name!r} cannot update sent messages")

    async def _post(
        self, url: str, *, content: bytes, headers: Mapping[str, str], timeout_seconds: float
    ) -> HttpReply | ChannelResult:
        with self._log_redaction.active():
            reply = await post(
                self._client,
                url,
                content=content,
                headers=headers,
                timeout_seconds=timeout_seconds,
            )
        if isinstance(reply, HttpReply) and self._secrets:
            reply = replace(reply, secrets=self._secrets)
        return reply

    @staticmethod
    def _now() -> float:
        return time.time()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            await self._on_close()


class ClientLease:
    """One client shared by several adapters, closed by the last one if we own it."""

    def __init__(self, client: OutboundClient, *, owned: bool) -> None:
        self.client = client
        self._owned = owned
        self._holders = 0

    def acquire(self) -> Callable[[], Awaitable[None]]:
        """Register one more user; returns the callback that user calls when closing."""
        self._holders += 1
        released = False

        async def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._holders -= 1
            if self._holders == 0 and self._owned and not self.client.is_closed:
                await self.client.aclose()

        return release


def encode_json(payload: Mapping[str, Any]) -> bytes | ChannelResult:
    """Compact UTF-8 JSON, or a permanent failure when the message cannot be encoded."""
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        return ChannelResult.permanent(f"message is not JSON-serializable ({type(exc).__name__})")
