"""Message updates: send the outbox of ``services.message_updates``, at least once.

Each update is a ``message_update`` job of the work table (``store.port.Jobs``).
``run_once`` claims due jobs (committed before any
provider call), calls each channel's ``update`` outside any transaction
(``provider_call``), then asks ``domain.message_updates.decide_settle`` what the
answer makes of each: completed, retryable with backoff (transient), or discarded
(permanent, or ``MAX_ATTEMPTS`` used), all settled by one fenced statement that lands
only where the lease is still held. A job whose worker died is made due again by the
rescuer (``workers.rescuer``) once its lease expires, and claimed again. Each round
also carries the old outbox's rows, which a replica of the previous release may still
queue during a rolling upgrade (``Jobs.carry_message_updates``).
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
from uns_server.domain.jobs import JobKind, JobState, SettleJob
from uns_server.domain.message_updates import MessageUpdate
from uns_server.domain.records import Job
from uns_server.services.message_updates import (
    IN_FLIGHT,
    IN_FLIGHT_SENT,
    TOPIC_MESSAGE_UPDATES,
    queue,
    sent_since,
    still_sending,
    updatable,
)
from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.provider_call import guarded_call
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.message_updates")
BATCH = 32
KINDS = (JobKind.MESSAGE_UPDATE,)
# An in-flight delivery that the channel did not take leaves no message to update.
NOTHING_TO_UPDATE = ChannelResult.delivered("", metadata={"skipped": "no message was sent"})


_COUNTED = {
    JobState.COMPLETED: "done",
    JobState.RETRYABLE: "retried",
    JobState.DISCARDED: "failed",
}


@dataclass(frozen=True)
class UpdateResult:
    done: int = 0
    retried: int = 0
    failed: int = 0  # given up: discarded by the settle
    lost: int = 0  # settles whose lease was no longer held (nothing changed)
    more: bool = False  # a full batch: look again at once
    due_in: float | None = None  # until the next update falls due


class MessageUpdater(LoopWorker):
    name = "message_updates"  # repeated faults turn health NOT_SERVING
    kinds = frozenset(KINDS)  # the rescuer wakes it when it makes one due

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
            await tx.jobs.carry_message_updates(now, limit=BATCH)
            claims = await tx.jobs.claim(KINDS, now=now, limit=BATCH, lease=self._lease)
        counts: Counter[str] = Counter()
        expanded: dict[int, list[MessageUpdate]] = {}
        updates = [MessageUpdate.of(job) for job in claims]
        results = await asyncio.gather(
            *(
                self._send(job.id, update, expanded)
                for job, update in zip(claims, updates, strict=True)
            )
        )
        if claims:
            now = self._clock()
            settles = [
                self._decide(job, result, now) for job, result in zip(claims, results, strict=True)
            ]
            async with self._store.write() as tx:
                landed = await tx.jobs.settle_many(settles, now)
                # A stand-in's updates are queued by the commit that settles it, so a
                # worker dying in between cannot queue them twice.
                more = [
                    u
                    for s in settles
                    if s.id in landed and s.state is JobState.COMPLETED
                    for u in expanded.get(s.id, ())
                ]
                if more:
                    await queue(tx, more, now)
            for settle, update, result in zip(settles, updates, results, strict=True):
                counts[_COUNTED[settle.state] if settle.id in landed else "lost"] += 1
                if settle.id in landed and settle.state is JobState.DISCARDED:
                    self._gave_up(update, result.error)
        if counts:
            log.info("message updates", extra=dict(counts))
        settled = UpdateResult(counts["done"], counts["retried"], counts["failed"], counts["lost"])
        if len(claims) == BATCH:
            return dataclasses.replace(settled, more=True)
        async with self._store.read() as tx:
            due = await tx.jobs.next_due_at(KINDS)
        return dataclasses.replace(settled, due_in=seconds_until(due, self._clock()))

    def _decide(self, job: Job, result: ChannelResult, now: datetime) -> SettleJob:
        """The settle of one answer, fenced by the job's lease token."""
        decision = rules.decide_settle(
            success=result.success,
            retryable=result.retryable,
            error=result.error,
            retry_after_seconds=result.retry_after_seconds,
            attempts=job.attempt,  # the claim counted this one
            max_attempts=job.max_attempts,
            now=now,
            rand=self._rand,
        )
        return rules.settle_job(job, decision)

    @staticmethod
    def _gave_up(update: MessageUpdate, error: str | None) -> None:
        log.warning(
            "message update failed for good",
            extra={
                "notification_id": update.notification_id,
                "channel": update.channel,
                "error": error,
            },
        )

    async def _reference(
        self, job_id: int, update: MessageUpdate, expanded: dict[int, list[MessageUpdate]]
    ) -> Mapping[str, Any] | ChannelResult:
        """The reference to update. One queued while its delivery was in flight is the
        delivery's, once that attempt has settled: until then a retry, and nothing to
        do if the channel did not take the message."""
        known = update.reference.get(IN_FLIGHT_SENT)
        if known is not None:
            return await self._expand(job_id, update, known, expanded)
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
        self,
        job_id: int,
        update: MessageUpdate,
        known: Sequence[str],
        expanded: dict[int, list[MessageUpdate]],
    ) -> ChannelResult:
        """An ``IN_FLIGHT_SENT`` stand-in: once nothing is being sent, an update of each
        message sent since it was queued (a person's message, a follow-up step's), put
        in ``expanded`` for the settle to queue, and it is done; until then, a retry."""
        now = self._clock()
        async with self._store.read() as tx:
            row = await tx.notifications.get(update.notification_id)
            stepping = row is not None and await tx.follow_ups.sending(row.id, now)
        if row is None:
            return NOTHING_TO_UPDATE
        if still_sending(row, now, follow_up_sending=stepping):
            return ChannelResult.transient("messages are still being sent")
        queued = sent_since(row, known, update.outcome)
        expanded[job_id] = queued
        return ChannelResult.delivered("", metadata={"queued": str(len(queued))})

    async def _send(
        self, job_id: int, update: MessageUpdate, expanded: dict[int, list[MessageUpdate]]
    ) -> ChannelResult:
        reference = await self._reference(job_id, update, expanded)
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
