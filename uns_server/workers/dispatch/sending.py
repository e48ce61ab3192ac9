"""One claim's attempt: call each channel still to deliver, outside any transaction,
then hand the answers to ``Settler``. A provider call is bounded by a share of the
lease; a timeout or an adapter bug is a transient answer, never a lost obligation
(``workers.provider_call``). Each call holds a place in its channel's bulkhead
(``bulkheads``) until it returns; a channel with no place left is not called, and its
answer is *busy* (settled as a deferral, no attempt spent)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from opentelemetry.trace import Tracer

from uns_server.channels.base import ChannelResult, OutboundMessage
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain import schedule
from uns_server.domain.enums import Status
from uns_server.domain.staged_rules import urgency_of
from uns_server.observability import tracing
from uns_server.observability.metrics import Metrics
from uns_server.observability.phases import PROVIDER, phased
from uns_server.services import staging, targeting
from uns_server.services.action_links import ActionLinkService
from uns_server.services.targeting import PersonRoute
from uns_server.store.port import Store
from uns_server.workers.dispatch.bulkheads import Bulkheads
from uns_server.workers.dispatch.claims import ChannelAttempt, Claim, started_events
from uns_server.workers.dispatch.settlement import Settler
from uns_server.workers.messages import NOBODY as NOBODY_PERSON
from uns_server.workers.messages import outbound_message, send_built
from uns_server.workers.provider_call import guarded_call

# The stand-in channel of a delivery whose targets reach nobody and whose policy has no
# channel: it fails permanently (a dead letter for GUARANTEED work; Replay asks again).
NOBODY = "targets"

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


def _failure_fields(attempts: list[ChannelAttempt]) -> dict[str, str]:
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
        settlement: Settler,
        *,
        lease: timedelta,
        tracer: Tracer,
        metrics: Metrics,
        links: ActionLinkService | None,
        bulkheads: Bulkheads,
        store: Store | None = None,
    ) -> None:
        self._channels = channels
        self._bulkheads = bulkheads
        self._clock = clock
        self._settlement = settlement
        self._lease = lease
        self._tracer, self._metrics = tracer, metrics
        self._links = links  # Acknowledge/Dismiss links in messages (HTTP surface on)
        self._store = store  # people and rotations, for policies with targets

    async def ask_people(self, claim: Claim) -> Claim:
        """The claim with its policy's targets resolved now (SPEC §6): a rotation asks
        whoever is on call at this attempt; each person's routes not yet accepted in
        this cycle join the channels to send, unless their own quiet hours hold them
        (``held``: sent by a later attempt when the hold ends). Once the ack has been
        answered (from a message sent before a hold), nobody more is asked. A claim
        without targets is unchanged."""
        n = claim.notification
        doc = n.notification
        if not doc.effective.targets or self._store is None:
            return claim
        now = self._clock()
        asked = await targeting.asked_at(
            self._store, doc.effective.targets, now, self._channels.names()
        )
        intent = doc.intent.value if doc.intent else None
        urgency = urgency_of(doc.effective.urgency, intent)
        # A person's staged rules (SPEC §7): only their immediate contacts now.
        routes = staging.now_routes(asked, urgency, n.require_ack)
        done = set(n.outcome.channels_succeeded)
        todo = [r for r in routes if r.key not in done]
        if n.ack_status is not None:
            todo = []  # the obligation was answered while a message was held
        held = schedule.held_until({r.key: r.quiet_hours for r in todo}, now, intent)
        channels = claim.channels + tuple(r.key for r in todo if r.key not in held)
        if not asked.routes and not doc.effective.channels:
            channels = (NOBODY,)  # refused below: nobody can be asked
        staged = staging.stage(
            asked,
            urgency,
            require_ack=n.require_ack,
            started=n.outcome.staged,
            not_asked={r.recipient_id for r in todo if r.key in held},
            cycle=n.cycle,
            now=now,
        )
        return replace(
            claim,
            channels=channels,
            routes=routes,
            unreachable=asked.unreachable,
            held=held,
            staged=staged if n.ack_status is None else (),
        )

    async def _people_started(self, claim: Claim) -> None:
        """CHANNEL_ATTEMPT_STARTED for each person's message about to be sent, with its
        ``recipient_id`` and ``route``, committed before the provider calls like the
        claim's own for the shared channels (routes are known only now)."""
        keys = [k for k in claim.channels if claim.route(k) is not None]
        if not keys or self._store is None:
            return
        async with self._store.write() as tx:
            await tx.events.append(started_events(claim, keys), self._clock())

    async def deliver(self, claim: Claim, entered: set[str]) -> None:
        """Send to the claim's channels and its people, and settle what they answered.
        ``entered``: the claim's channels whose bulkhead places its admission took
        (``Dispatcher._spawn``); each is given back when its call returns, the rest at
        the latest when this returns."""
        try:
            await self._deliver(claim, entered)
        finally:
            for channel in entered:
                self._bulkheads.leave(channel)
            entered.clear()

    async def _deliver(self, claim: Claim, entered: set[str]) -> None:
        try:
            claim = await self.ask_people(claim)
            await self._people_started(claim)
        except Exception:  # the database is away: the lease expires and it is retried
            log.exception("targets not resolved", extra={"notification_id": claim.notification.id})
            return
        n = claim.notification
        nid = n.id
        started = time.monotonic()
        outcome = "error"
        with tracing.attempt_span(
            self._tracer,
            notification_id=nid,
            attempt=claim.attempt,
            cycle=n.cycle,
            trace_context=n.notification.trace_context,
        ) as span:
            try:
                if len(claim.channels) == 1:  # the common case: no task for the gather
                    attempts = [await self._send(claim, claim.channels[0], entered)]
                else:
                    attempts = await asyncio.gather(
                        *(self._send(claim, ch, entered) for ch in claim.channels)
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
    async def _send(self, claim: Claim, channel_name: str, entered: set[str]) -> ChannelAttempt:
        nid = claim.notification.id
        started = time.monotonic()
        # Spans and metrics name the real channel: a label per person would not scale.
        route = claim.route(channel_name)
        label = route.channel if route else channel_name
        # A bulkhead place: the admission's for a shared channel, taken now for a
        # person's route (known only now); none for a channel nobody can call.
        if route is not None:
            place = route.channel if self._bulkheads.enter(route.channel) else None
        elif channel_name in entered:
            place = channel_name
            entered.discard(channel_name)
        else:
            place = None
        if place is None and (route is not None or channel_name in self._channels):
            return ChannelAttempt(channel_name, _busy(label, self._bulkheads), self._clock(), True)
        with tracing.channel_span(self._tracer, channel=label, notification_id=nid) as span:
            try:
                result = await self._call_adapter(claim, channel_name)
            finally:
                if place is not None:
                    self._bulkheads.leave(place)
            kind = "success" if result.success else "transient" if result.retryable else "permanent"
            span.set_attribute("uns.result", kind)
            if not result.success:
                tracing.set_error(span, result.error or kind)
        self._metrics.channel_send(label, kind, time.monotonic() - started)
        return ChannelAttempt(channel_name, result, self._clock())

    async def _call_adapter(self, claim: Claim, channel_name: str) -> ChannelResult:
        route = claim.route(channel_name)
        if channel_name == NOBODY:
            result = ChannelResult.permanent(
                "no target can be reached: " + _unreachable_text(claim.unreachable)
            )
        elif route is not None:
            result = await self._call(
                claim, route.channel, lambda: self._message(claim, channel_name, route)
            )
        elif channel_name not in self._channels:
            result = ChannelResult.permanent(f"channel {channel_name!r} is not configured")
        else:
            result = await self._call(
                claim, channel_name, lambda: self._message(claim, channel_name)
            )
        return result

    async def _call(
        self, claim: Claim, channel: str, message: Callable[[], OutboundMessage]
    ) -> ChannelResult:
        """The provider call, guarded (building the message included: a bug there must
        not lose the obligation either)."""
        adapter = self._channels.get(channel)
        return await guarded_call(
            lambda: send_built(adapter, message()),
            lease=self._lease,
            log_extra={"channel": channel, "notification_id": claim.notification.id},
        )

    def _message(
        self, claim: Claim, channel: str, route: PersonRoute | None = None
    ) -> OutboundMessage:
        n = claim.notification
        make_links = None
        if self._links is not None and n.require_ack:
            minutes = n.notification.effective.ack_timeout_minutes
            make_links = self._links.for_message(n.id, minutes, self._clock())
        return outbound_message(
            n,
            attempt=claim.attempt,
            # Stable across retries of one cycle, so providers can drop duplicates.
            idempotency_token=f"{n.id}:{channel}:{n.cycle}",
            links=make_links,
            recipient_id=route.recipient_id if route else "",
            to=route.address if route else "",
            channel_type=self._channels.type_of(route.channel if route else channel),
            person=route.person if route else NOBODY_PERSON,
        )


def _busy(channel: str, bulkheads: Bulkheads) -> ChannelResult:
    """The answer of a channel not called: its bulkhead was full."""
    return ChannelResult.transient(
        f"not sent: channel {channel!r} has {bulkheads.busy(channel)} provider calls in flight "
        f"(its bulkhead holds {bulkheads.limit})",
        metadata={"bulkhead_full": True, "provider_effect_possible": False},
    )


def _unreachable_text(unreachable: Sequence[Mapping[str, str]]) -> str:
    return (
        "; ".join(
            f"{u.get('recipient_id') or u.get('rotation_id')}: {u['reason']}" for u in unreachable
        )
        or "the targets ask nobody"
    )
