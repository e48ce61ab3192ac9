"""Message updates: send the outbox of ``services.message_updates``, at least once.

``run_once`` claims due updates with a lease and a fencing token, calls each channel's
``update`` outside any transaction (``provider_call``), then asks
``domain.message_updates.decide_settle`` what the answer makes of each: DONE, PENDING
again with backoff (transient), or FAILED (permanent, or ``MAX_ATTEMPTS`` used), which
the store records only while the lease is still held. An update whose worker died is
claimed again once its lease expires.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from uns_server.channels.base import ChannelResult, ObligationOutcome, UpdatableChannel
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain import message_updates as rules
from uns_server.domain.records import MessageUpdate
from uns_server.services.message_updates import (
    IN_FLIGHT,
    IN_FLIGHT_SENT,
    TOPIC_MESSAGE_UPDATES,
    sent_since,
    still_sending,
    updatable,
)
from uns_server.store.port import Fenced, Queued, Store, WriteTransaction
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.provider_call import guarded_call
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.message_updates")
BATCH = 32
# An in-flight delivery that the channel did not take leaves no message to update.
NOTHING_TO_UPDATE = ChannelResult.delivered("", metadata={"skipped": "no message was sent"})


@dataclass(frozen=True)
class UpdateResult:
    done: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    more: bool = False  # a full batch: look again at once
    due_in: float | None = None  # until the next update falls due


class MessageUpdater(LoopWorker):
    name = "message_updates"  # repeated faults turn health NOT_SERVING

    def __init__(
        self,
        store: Store,
        channels: ChannelRegistry,
        clock: Callable[[], datetime],
        *,
        lease_seconds: float,
        idle_poll_seconds: float,
        rand: Callable[[], float] = random.random,
        supervision: Supervision | None = None,
    ) -> None:
        super().__init__(idle_poll_seconds, supervision)
        self._store = store
        self._channels = channels
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)
        self._rand = rand
        store.on_commit(TOPIC_MESSAGE_UPDATES, self.wake)

    async def run_once(self) -> UpdateResult:
        """Send one batch of due updates and settle them; then, unless the batch was
        full, read when the next one falls due."""
        now = self._clock()
        async with self._store.write() as tx:
            claims = await tx.message_updates.claim(now=now, limit=BATCH, lease=self._lease)
        expanded: dict[str, list[Queued]] = {}
        results = await asyncio.gather(*(self._send(update, expanded) for update, _ in claims))
        counts: Counter[str] = Counter()
        if claims:
            now = self._clock()
            async with self._store.write() as tx:
                for (update, token), result in zip(claims, results, strict=True):
                    counted = await self._settle(tx, update, token, result, now)
                    counts[counted] += 1
                    # A stand-in's updates are queued by the commit that settles it,
                    # so a worker dying in between cannot queue them twice.
                    if counted == "done" and expanded.get(update.id):
                        await tx.message_updates.enqueue(expanded[update.id], now)
                        tx.signal(TOPIC_MESSAGE_UPDATES)
            log.info("message updates", extra=dict(counts))
        settled = UpdateResult(counts["done"], counts["retried"], counts["failed"], counts["lost"])
        if len(claims) == BATCH:
            return dataclasses.replace(settled, more=True)
        async with self._store.read() as tx:
            due = await tx.message_updates.next_due_at()
        return dataclasses.replace(settled, due_in=seconds_until(due, self._clock()))

    async def _settle(
        self,
        tx: WriteTransaction,
        update: MessageUpdate,
        token: str,
        result: ChannelResult,
        now: datetime,
    ) -> str:
        """Record one answer, fenced by ``token``; which count it adds to."""
        decision = rules.decide_settle(
            success=result.success,
            retryable=result.retryable,
            error=result.error,
            retry_after_seconds=result.retry_after_seconds,
            attempts=update.attempts + 1,  # the claim counted this one
            now=now,
            rand=self._rand,
        )
        match decision:
            case rules.Done():
                fenced = await tx.message_updates.mark_done(update.id, token, now=now)
                counted = "done"
            case rules.RetryAt(at, error):
                fenced = await tx.message_updates.retry_at(
                    update.id, token, at=at, error=error, now=now
                )
                counted = "retried"
            case rules.GiveUp(error):
                fenced = await tx.message_updates.give_up(update.id, token, error=error, now=now)
                counted = "failed"
        if fenced is Fenced.LOST:
            return "lost"
        if counted == "failed":
            log.warning(
                "message update failed for good",
                extra={
                    "notification_id": update.notification_id,
                    "channel": update.channel,
                    "error": result.error,
                },
            )
        return counted

    async def _reference(
        self, update: MessageUpdate, expanded: dict[str, list[Queued]]
    ) -> Mapping[str, Any] | ChannelResult:
        """The reference to update. One queued while its delivery was in flight is the
        delivery's, once that attempt has settled: until then a retry, and nothing to
        do if the channel did not take the message."""
        known = update.reference.get(IN_FLIGHT_SENT)
        if known is not None:
            return await self._expand(update, known, expanded)
        channel = update.reference.get(IN_FLIGHT)
        if channel is None:
            reference: Mapping[str, Any] = update.reference
            return reference
        async with self._store.read() as tx:
            row = await tx.notifications.get(update.notification_id)
        ref = ((row.provider_refs or {}) if row is not None else {}).get(channel)
        if ref is not None:
            return ref.json if updatable(ref) else NOTHING_TO_UPDATE
        if row is not None and row.lease_token is not None:
            return ChannelResult.transient("the delivery is still in flight")
        return NOTHING_TO_UPDATE

    async def _expand(
        self, update: MessageUpdate, known: Sequence[str], expanded: dict[str, list[Queued]]
    ) -> ChannelResult:
        """An ``IN_FLIGHT_SENT`` stand-in: once nothing is being sent, an update of each
        message sent since it was queued (a person's message, a follow-up step's), put
        in ``expanded`` for the settle to queue, and it is done; until then, a retry."""
        now = self._clock()
        async with self._store.read() as tx:
            row = await tx.notifications.get(update.notification_id)
        if row is None:
            return NOTHING_TO_UPDATE
        if still_sending(row, now):
            return ChannelResult.transient("messages are still being sent")
        queued = sent_since(row, known, update.outcome)
        expanded[update.id] = queued
        return ChannelResult.delivered("", metadata={"queued": str(len(queued))})

    async def _send(
        self, update: MessageUpdate, expanded: dict[str, list[Queued]]
    ) -> ChannelResult:
        reference = await self._reference(update, expanded)
        if isinstance(reference, ChannelResult):
            return reference
        name = update.channel
        channel = self._channels.get(name) if name in self._channels else None
        if not isinstance(channel, UpdatableChannel):
            return ChannelResult.permanent(f"channel {name!r} is not configured for updates")
        return await guarded_call(
            lambda: channel.update(reference, ObligationOutcome(**update.outcome)),
            lease=self._lease,
            log_extra={"channel": name, "notification_id": update.notification_id},
        )
