"""Message updates: send the outbox of ``services.message_updates``, at least once.

``run_once`` claims due updates with a lease and a fencing token, calls each channel's
``update`` outside any transaction, then records the outcome only while the lease is
still held: DONE, PENDING again with backoff (transient), or FAILED (permanent, or
``MAX_ATTEMPTS`` used). An update whose worker died is claimed again once its lease
expires. The same loop prunes old provider-callback receipts.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from uns_server.aio import wait_event
from uns_server.channels.base import ChannelResult, Settlement, UpdatableChannel
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain.records import MessageUpdate
from uns_server.domain.retry import next_attempt_at
from uns_server.services.message_updates import IN_FLIGHT, TOPIC_MESSAGE_UPDATES, updatable
from uns_server.store import links, message_updates, notifications
from uns_server.store.db import Database

log = logging.getLogger("uns.message_updates")
BATCH = 32
MAX_ATTEMPTS = 10
SEND_TIMEOUT_SHARE_OF_LEASE = 0.8
# Provider callbacks are remembered this long (replays are refused meanwhile; Slack's
# own signatures expire after five minutes, PagerDuty's never do).
CALLBACK_RECEIPT_DAYS = 7
# An in-flight delivery that the channel did not take leaves no message to update.
NOTHING_TO_UPDATE = ChannelResult.delivered("", metadata={"skipped": "no message was sent"})


@dataclass(frozen=True)
class UpdateResult:
    done: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0


class MessageUpdater:
    def __init__(
        self,
        db: Database,
        channels: ChannelRegistry,
        clock: Callable[[], datetime],
        *,
        lease_seconds: float,
        idle_poll_seconds: float,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._db = db
        self._channels = channels
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)
        self._poll = idle_poll_seconds
        self._rand = rand
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        db.on_commit(TOPIC_MESSAGE_UPDATES, self._wake.set)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run_once(self) -> UpdateResult:
        now = self._clock()
        async with self._db.write() as tx:
            claims = await message_updates.claim(tx.conn, now=now, limit=BATCH, lease=self._lease)
        results = await asyncio.gather(*(self._send(update) for update, _ in claims))
        done = retried = failed = lost = 0
        now = self._clock()
        async with self._db.write() as tx:
            for (update, token), result in zip(claims, results, strict=True):
                attempts = update.attempts + 1
                if result.success:
                    status, due = message_updates.DONE, None
                elif result.retryable and attempts < MAX_ATTEMPTS:
                    status = message_updates.PENDING
                    due = next_attempt_at(
                        now,
                        attempts,
                        rand=self._rand,
                        retry_after_seconds=result.retry_after_seconds or 0.0,
                    )
                else:
                    status, due = message_updates.FAILED, None
                ok = await message_updates.settle(
                    tx.conn,
                    update.id,
                    token,
                    status=status,
                    now=now,
                    next_attempt=due,
                    error=result.error,
                )
                if not ok:
                    lost += 1
                elif status == message_updates.DONE:
                    done += 1
                elif status == message_updates.PENDING:
                    retried += 1
                else:
                    failed += 1
                    log.warning(
                        "message update failed for good",
                        extra={
                            "notification_id": update.notification_id,
                            "channel": update.channel,
                            "error": result.error,
                        },
                    )
        return UpdateResult(done, retried, failed, lost)

    async def _reference(self, update: MessageUpdate) -> Mapping[str, Any] | ChannelResult:
        """The reference to update. One queued while its delivery was in flight is the
        delivery's, once that attempt has settled: until then a retry, and nothing to
        do if the channel did not take the message."""
        channel = update.reference.get(IN_FLIGHT)
        if channel is None:
            reference: Mapping[str, Any] = update.reference
            return reference
        async with self._db.read() as conn:
            row = await notifications.get(conn, update.notification_id)
        ref = ((row.provider_refs or {}) if row is not None else {}).get(channel)
        if isinstance(ref, Mapping):
            return ref if updatable(ref) else NOTHING_TO_UPDATE
        if row is not None and row.lease_token is not None:
            return ChannelResult.transient("the delivery is still in flight")
        return NOTHING_TO_UPDATE

    async def _send(self, update: MessageUpdate) -> ChannelResult:
        reference = await self._reference(update)
        if isinstance(reference, ChannelResult):
            return reference
        name = update.channel
        channel = self._channels.get(name) if name in self._channels else None
        if not isinstance(channel, UpdatableChannel):
            return ChannelResult.permanent(f"channel {name!r} is not configured for updates")
        try:
            async with asyncio.timeout(self._lease.total_seconds() * SEND_TIMEOUT_SHARE_OF_LEASE):
                return await channel.update(reference, Settlement(**update.outcome))
        except TimeoutError:
            return ChannelResult.transient("provider call timed out")
        except Exception as exc:  # an adapter bug must not lose the update
            log.exception("message update raised", extra={"channel": name})
            return ChannelResult.transient(f"adapter error: {type(exc).__name__}")

    async def prune_receipts(self) -> int:
        before = self._clock() - timedelta(days=CALLBACK_RECEIPT_DAYS)
        async with self._db.write() as tx:
            return await links.prune_callbacks(tx.conn, before)

    async def run(self) -> None:
        sweeps = 0
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                result = await self.run_once()
                if result != UpdateResult():
                    log.info("message updates", extra=result.__dict__)
                if sweeps % 1000 == 0:
                    await self.prune_receipts()
                sweeps += 1
                if result.done + result.retried + result.failed + result.lost == BATCH:
                    continue
                async with self._db.read() as conn:
                    due = await message_updates.next_due_at(conn)
            except Exception:
                log.exception("message update sweep failed")
                due = None
            timeout = self._poll
            if due is not None:
                timeout = min(timeout, max(0.0, (due - self._clock()).total_seconds()))
            await wait_event(self._wake, timeout)
