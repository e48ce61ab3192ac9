"""One claim's attempt: call each channel still to deliver, outside any transaction,
then hand the answers to ``Settlement``. A provider call is bounded by a share of the
lease; a timeout or an adapter bug is a transient answer, never a lost obligation
(``workers.provider_call``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from opentelemetry.trace import Tracer

from uns_server.channels.base import ChannelResult, OutboundMessage
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain.enums import Status
from uns_server.observability import tracing
from uns_server.observability.metrics import Metrics
from uns_server.observability.phases import PROVIDER, phased
from uns_server.services.action_links import ActionLinkService
from uns_server.workers.dispatch.claims import Attempt, Claim
from uns_server.workers.dispatch.settlement import Settlement
from uns_server.workers.messages import outbound_message
from uns_server.workers.provider_call import guarded_call

log = logging.getLogger("uns.dispatch")

_ATTEMPT_OUTCOME = {
    Status.DELIVERED: "delivered",
    Status.PENDING: "retry",
    Status.FAILED: "failed",
}
# Success is the common case and already an event: DEBUG keeps INFO logs readable
# (and cheap) at volume; anything that needs a look is louder.
_ATTEMPT_LOG_LEVEL = {
    "delivered": logging.DEBUG,
    "retry": logging.INFO,
    "failed": logging.WARNING,
    "lease_lost": logging.WARNING,
}


def _failure_fields(attempts: list[Attempt]) -> dict[str, str]:
    """What an operator needs from a failed or retried attempt's log line: which
    channel(s) failed, the error class (``transient`` / ``permanent``) and the
    provider's error message, one per failed channel, in the order of ``channel``."""
    failed = [a for a in attempts if not a.result.success]
    if not failed:
        return {}
    return {
        "channel": ",".join(a.channel for a in failed),
        "error_class": ",".join("transient" if a.result.retryable else "permanent" for a in failed),
        "error": "; ".join(a.result.error or "no error message" for a in failed),
    }


class Sender:
    def __init__(
        self,
        channels: ChannelRegistry,
        clock: Callable[[], datetime],
        settlement: Settlement,
        *,
        lease: timedelta,
        tracer: Tracer,
        metrics: Metrics,
        links: ActionLinkService | None,
    ) -> None:
        self._channels = channels
        self._clock = clock
        self._settlement = settlement
        self._lease = lease
        self._tracer, self._metrics = tracer, metrics
        self._links = links  # Acknowledge/Dismiss links in messages (HTTP surface on)

    async def deliver(self, claim: Claim) -> None:
        """Send to the claim's channels and settle what they answered."""
        n = claim.notification
        nid = n.id
        started = time.monotonic()
        outcome = "error"
        with tracing.attempt_span(
            self._tracer,
            notification_id=nid,
            attempt=claim.attempt,
            cycle=n.cycle,
            trace_context=n.notification.get("trace_context"),
        ) as span:
            try:
                if len(claim.channels) == 1:  # the common case: no task for the gather
                    attempts = [await self._send(claim, claim.channels[0])]
                else:
                    attempts = await asyncio.gather(
                        *(self._send(claim, ch) for ch in claim.channels)
                    )
                status = await self._settlement.submit(claim, attempts)
                outcome = "lease_lost" if status is None else _ATTEMPT_OUTCOME[status]
                span.set_attribute("uns.outcome", outcome)
                lost = status is None
                log.log(
                    _ATTEMPT_LOG_LEVEL[outcome],
                    "lease lost before settling" if lost else "delivery attempt settled",
                    extra={
                        "notification_id": nid,
                        "attempt": claim.attempt,
                        "cycle": n.cycle,
                        "outcome": outcome,
                        **_failure_fields(attempts),
                    },
                )
            finally:
                self._metrics.attempt(outcome, time.monotonic() - started)

    @phased(PROVIDER)
    async def _send(self, claim: Claim, channel_name: str) -> Attempt:
        nid = claim.notification.id
        started = time.monotonic()
        with tracing.channel_span(self._tracer, channel=channel_name, notification_id=nid) as span:
            result = await self._call_adapter(claim, channel_name)
            kind = "success" if result.success else "transient" if result.retryable else "permanent"
            span.set_attribute("uns.result", kind)
            if not result.success:
                tracing.set_error(span, result.error or kind)
        self._metrics.channel_send(channel_name, kind, time.monotonic() - started)
        return Attempt(channel_name, result, self._clock())

    async def _call_adapter(self, claim: Claim, channel_name: str) -> ChannelResult:
        if channel_name not in self._channels:
            return ChannelResult.permanent(f"channel {channel_name!r} is not configured")
        channel = self._channels.get(channel_name)
        return await guarded_call(
            lambda: channel.send(self._message(claim, channel_name)),
            lease=self._lease,
            log_extra={"channel": channel_name, "notification_id": claim.notification.id},
        )

    def _message(self, claim: Claim, channel: str) -> OutboundMessage:
        n = claim.notification
        make_links = None
        if self._links is not None and n.require_ack:
            minutes = int(n.notification["effective"]["ack_timeout_minutes"])
            make_links = self._links.for_message(n.id, minutes, self._clock())
        return outbound_message(
            n,
            attempt=claim.attempt,
            # Stable across retries of one cycle, so providers can drop duplicates.
            idempotency_token=f"{n.id}:{channel}:{n.cycle}",
            links=make_links,
        )
