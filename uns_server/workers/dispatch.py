"""Dispatch: deliver every accepted obligation at least once (seed 000 §1.1, seeds 003/004).

One attempt, as three steps:

1. **Claim** (one transaction per batch): lock due leaders (SKIP LOCKED), give each
   a lease and a fencing token, and commit ATTEMPT_STARTED plus one
   CHANNEL_ATTEMPT_STARTED per channel *before* any provider I/O. A row whose
   previous lease expired unsettled is flagged ``provider_effect_may_have_occurred``;
   if that interrupted attempt was the cycle's last, the row is not attempted again
   but settled FAILED right there, as an exhausted retry would be
   (``domain.lifecycle.decide_claim``).
   A leader accepted while this process has free slots skips this step: intake's
   transaction inserts it leased, with the same events (``reserve``, ``lease_new``,
   ``hand_over``), and hands the claim over after its commit.
2. **Send** outside any transaction, only to channels not yet delivered in this
   cycle (a retry never re-sends to a channel that already accepted).
3. **Settle** (one transaction): always append the CHANNEL_ATTEMPT_RESULT events;
   then, only if the lease is still ours, move the row as
   ``domain.lifecycle.decide_settlement`` decides: DELIVERED (+ ack PENDING,
   followers DEDUPLICATED), PENDING again with backoff, or FAILED (dead-lettered for
   GUARANTEED, followers promoted / relinked, or the obligation handed off to a newer
   active owner of the dedup key: ``domain.lifecycle.decide_hand_off``). A lost
   lease records LEASE_LOST instead and changes nothing else.

Settlements are batched: deliveries that finish while a settle transaction is in
flight are settled together in the next one (one row lock query, one executemany
per kind of update, one audit insert, one events append). Fencing stays per row:
a row whose lease was lost gets LEASE_LOST while the others in the batch settle.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from uns_server.aio import wait_event
from uns_server.batching import GroupCommit
from uns_server.channels.base import ChannelResult, OutboundMessage
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain import lifecycle, schedule
from uns_server.domain.enums import EventKind, Status
from uns_server.observability import tracing
from uns_server.observability.phases import ATTEMPT, CLAIM, DISPATCH_LOOP, PROVIDER, SETTLE, phased
from uns_server.observability.telemetry import Telemetry
from uns_server.services.action_links import ActionLinkService
from uns_server.store import audit, dispatch, notifications
from uns_server.store.db import TOPIC_WORK, Database, WriteTx, is_unreachable
from uns_server.store.events import NewEvent, append
from uns_server.store.pg import Row
from uns_server.workers.messages import outbound_message
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.dispatch")
Clock = Callable[[], datetime]

# A provider call that outlives this share of the lease would settle too late anyway.
SEND_TIMEOUT_SHARE_OF_LEASE = 0.8
# How long a worker keeps trying to record a provider's answer while the database is
# unreachable (past it, the lease expires and the attempt is recovered as usual).
SETTLE_RETRY_SECONDS_MAX = 120.0
SETTLE_RETRY_DELAY_SECONDS = 0.25
SETTLE_RETRY_DELAY_SECONDS_MAX = 5.0
# Most deliveries settled in one transaction (the rest wait for the next one).
SETTLE_BATCH_MAX = 64
# A wake-up that brings no sign of new due work (a delivery finished, freeing a slot)
# claims only if the last claim is this old. This bounds how late a retry that fell due
# meanwhile is picked up while deliveries are in flight.
QUIET_RECLAIM_SECONDS = 0.05
# This worker's name in ``Supervision`` (repeated claim faults turn health NOT_SERVING).
SUPERVISED_NAME = "dispatch"


@dataclass(frozen=True)
class Claim:
    row: Row
    token: str
    attempt: int
    cycle_attempt: int
    channels: tuple[str, ...]  # still to deliver in this cycle


@dataclass(frozen=True)
class Attempt:
    channel: str
    result: ChannelResult
    observed_at: datetime


@dataclass
class _Settled:
    """One delivery's part of a settle transaction."""

    claim: Claim
    base: dict[str, Any]
    row: Row | None = None  # the locked row; None when the lease was lost
    status: Status | None = None
    dead_letter: bool = False
    results: list[NewEvent] = field(default_factory=list)
    followers: list[NewEvent] = field(default_factory=list)
    final: NewEvent | None = None  # DELIVERY_RESULT or LEASE_LOST

    def events(self) -> list[NewEvent]:
        return [*self.results, *self.followers, *([self.final] if self.final else [])]


class Dispatcher:
    def __init__(
        self,
        db: Database,
        channels: ChannelRegistry,
        clock: Clock,
        *,
        lease_seconds: float,
        batch_size: int,
        concurrency: int,
        idle_poll_seconds: float,
        rand: Callable[[], float] = random.random,
        telemetry: Telemetry | None = None,
        supervision: Supervision | None = None,
        links: ActionLinkService | None = None,
    ) -> None:
        self._db = db
        self._links = links  # Acknowledge/Dismiss links in messages (HTTP surface on)
        self._channels = channels
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)
        self._batch = batch_size
        self._concurrency = concurrency
        self._idle_poll = idle_poll_seconds
        # While deliveries are in flight, claim again once this many slots are free.
        self._refill_at = max(1, min(batch_size, concurrency) // 2)
        self._rand = rand
        self._supervision = supervision or Supervision()
        telemetry = telemetry or Telemetry.disabled()
        self._tracer, self._metrics = telemetry.tracer, telemetry.metrics
        self._wake = asyncio.Event()
        # Work signals (commits that made work due, here or in another process) counted,
        # and how many of them the last claim's query could see: a signal that came
        # before the claim looked is covered by it, one after may not be.
        self._signals = 0
        self._signals_seen = -1
        self._last_claim = 0.0
        self._more_due = True  # the last claim was full (or failed): claim again
        # The next due time read while idle, and the work-signal count it reflects.
        self._due_known: tuple[int, datetime | None] | None = None
        self._stopping = asyncio.Event()
        self._running = False
        self._inflight: set[asyncio.Task[None]] = set()
        # Slots promised to callers that lease new rows themselves (``reserve``).
        self._reserved = 0
        # Deliveries that finish while a settle transaction is in flight settle
        # together in the next one.
        self._settler: GroupCommit[tuple[Claim, Sequence[Attempt]], Status | None] = GroupCommit(
            self._settle_many_durably, max_batch=SETTLE_BATCH_MAX
        )
        db.on_commit(TOPIC_WORK, self.wake)

    def wake(self) -> None:
        """Due work may have appeared: claim at the next chance."""
        self._signals += 1
        self._wake.set()

    def _claim_worthwhile(self) -> bool:
        return (
            self._more_due
            or self._signals != self._signals_seen
            or time.monotonic() - self._last_claim >= QUIET_RECLAIM_SECONDS
        )

    async def run_once(self, limit: int | None = None) -> int:
        """Claim one batch and deliver it to completion; returns how many were claimed."""
        claims = await self.claim(limit or self._batch)
        await asyncio.gather(*(self.deliver(c) for c in claims))
        return len(claims)

    def stop(self) -> None:
        """Claim nothing more; ``run`` returns once in-flight deliveries have settled.
        (Cancelling instead could interrupt a transaction half-way — on SQLite that
        can leave the write lock held by a connection nobody returns.)"""
        self._stopping.set()
        self._wake.set()

    def reserve(self, wanted: int) -> int:
        """Up to ``wanted`` delivery slots for leaders that the caller (intake) leases
        in the transaction that inserts them (``lease_new``), which saves their claim
        transaction. Every reservation ends in ``hand_over``, committed or not. None
        unless ``run`` is delivering."""
        if not self._running or self._stopping.is_set():
            return 0
        granted = max(0, min(wanted, self._concurrency - len(self._inflight) - self._reserved))
        self._reserved += granted
        return granted

    def can_deliver(self, row: Row) -> bool:
        """Is every channel of this leader configured here? (Work for a channel this
        replica lacks is left to a replica that has it, never failed here.)"""
        return all(ch in self._channels for ch in row["notification"]["effective"]["channels"])

    def lease_new(self, row: dict[str, Any], now: datetime) -> tuple[Claim, list[NewEvent]]:
        """Lease a leader about to be inserted, as a claim would: its first attempt.
        Sets the row's lease columns; returns the claim and the events to commit with
        the row (ATTEMPT_STARTED and one CHANNEL_ATTEMPT_STARTED per channel)."""
        claim = Claim(dict(row), str(uuid.uuid4()), 1, 1, _remaining_channels(row))
        row |= {
            "lease_token": claim.token,
            "lease_until": now + self._lease,
            "attempts": 1,
            "cycle_attempts": 1,
        }
        return claim, _claim_events(claim, recovered=False)

    def hand_over(self, reserved: int, claims: Sequence[Claim]) -> None:
        """Release ``reserved`` slots and deliver ``claims`` (leased by a committed
        transaction; none if it failed)."""
        self._reserved -= reserved
        self._wake.set()
        if not self._running:  # cancelled meanwhile: the leases expire and are recovered
            return
        for claim in claims:
            self._spawn(claim)

    def _spawn(self, claim: Claim) -> None:
        task = asyncio.create_task(self._deliver_logged(claim))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        task.add_done_callback(lambda _t: self._wake.set())

    @phased(DISPATCH_LOOP)
    async def run(self) -> None:
        """Keep up to ``concurrency`` deliveries in flight until stopped (or cancelled)."""
        inflight = self._inflight
        self._running = True
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                free = self._concurrency - len(inflight) - self._reserved
                claims: list[Claim] = []
                # Refill in batches, not one slot per finished delivery: a claim (and the
                # settlement of what it claimed) costs about the same for 1 row as for 8.
                if (
                    free > 0
                    and (not inflight or free >= self._refill_at)
                    and self._claim_worthwhile()
                ):
                    limit = min(free, self._batch)
                    try:
                        claims = await self.claim(limit)
                        self._more_due = len(claims) == limit
                        self._supervision.succeeded(SUPERVISED_NAME)
                    except Exception:
                        self._more_due = True
                        self._supervision.failed(SUPERVISED_NAME)
                        log.exception("claim failed; retrying after the idle poll interval")
                for c in claims:
                    self._spawn(c)
                if claims and self._more_due:
                    continue  # there may be more due work right now
                if not await self._sleep(bool(inflight)):
                    self._more_due = True  # timed out: something may have fallen due
            # Leases handed over by transactions still committing: deliver them too.
            while self._reserved:
                self._wake.clear()
                await wait_event(self._wake, self._idle_poll)
            await asyncio.gather(*inflight, return_exceptions=True)
        finally:
            self._running = False
            for task in inflight:
                task.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)
            await self._settler.close()

    async def _sleep(self, busy: bool) -> bool:
        """Wait for a wake-up (True) or until the next due time or idle poll (False)."""
        timeout = self._idle_poll
        if not busy:
            try:
                due = await self._next_due()
                if due is not None:
                    timeout = min(timeout, max(0.0, (due - self._clock()).total_seconds()))
            except Exception:
                self._supervision.failed(SUPERVISED_NAME)
                log.exception("next-due query failed")
        woken = await wait_event(self._wake, timeout)
        if not woken:
            self._due_known = None  # the idle poll also re-reads the next due time
        return woken

    async def _next_due(self) -> datetime | None:
        """The next due time, read again only when it may have moved earlier: after a
        work signal (every commit that leaves unleased work pending sends one, here or,
        through NOTIFY, in another process), once the time read has passed, or after
        an idle poll. Claims and settlements without a signal only remove or lease
        work, so a time read before them is at worst early (one needless wake-up). A
        lone producer went idle after every delivery and paid a read transaction for
        the same answer each time."""
        known = self._due_known
        if known is not None and known[0] == self._signals:
            due = known[1]
            if due is None or due > self._clock():
                return due
        signals = self._signals
        async with self._db.read() as conn:
            due = await dispatch.next_due_at(conn, self._channels.names())
        self._due_known = (signals, due)
        return due

    @phased(ATTEMPT)  # the task of each spawned delivery
    async def _deliver_logged(self, claim: Claim) -> None:
        try:
            await self.deliver(claim)
        except Exception:
            # The lease expires and another attempt recovers the row.
            log.exception("delivery failed", extra={"notification_id": claim.row["id"]})

    @phased(CLAIM)
    async def claim(self, limit: int) -> list[Claim]:
        now = self._clock()
        claims: list[Claim] = []
        async with self._db.write() as tx:
            self._signals_seen, self._last_claim = self._signals, time.monotonic()
            leases = await dispatch.claim(
                tx.conn, now=now, limit=limit, lease=self._lease, channels=self._channels.names()
            )
            new_events: list[NewEvent] = []
            exhausted: list[_Settled] = []
            for row, token in leases:
                decision = lifecycle.decide_claim(
                    attempts=row["attempts"],
                    cycle_attempts=row["cycle_attempts"],
                    max_attempts=row["max_attempts"],
                    recovered=row["lease_token"] is not None,
                    delivery_mode=row["delivery_mode"],
                )
                claim = Claim(
                    row, token, decision.attempt, decision.cycle_attempt, _remaining_channels(row)
                )
                if isinstance(decision, lifecycle.SettleExhausted):
                    exhausted.append(await self._settle_exhausted(tx, claim, decision, now))
                    continue
                claims.append(claim)
                new_events += _claim_events(claim, recovered=decision.recovered)
            await append(tx, [*new_events, *(e for s in exhausted for e in s.events())], now)
        for s in exhausted:
            self._count_settled(s, now)
        return claims

    async def _settle_exhausted(
        self, tx: WriteTx, claim: Claim, decision: lifecycle.SettleExhausted, now: datetime
    ) -> _Settled:
        """Settle a claimed row with no attempt left (its last one was interrupted) as
        an exhausted retry would be, without calling any provider; the counters keep
        the consumed attempts (the claim's increment is undone)."""
        row = claim.row
        base = {
            "attempt": claim.attempt,
            "cycle": row["cycle"],
            "cycle_attempt": claim.cycle_attempt,
        }
        outcome = lifecycle.interrupted_outcome(
            attempt=claim.attempt,
            cycle=row["cycle"],
            succeeded=row["outcome"].get("channels_succeeded", []),
            unconfirmed=claim.channels,
        )
        s = _Settled(claim, base, row=row, status=decision.status, dead_letter=decision.dead_letter)
        values: dict[str, Any] = {
            "status": decision.status.value,
            "dead_letter": decision.dead_letter,
            "outcome": outcome,
            "attempts": row["attempts"],
            "cycle_attempts": row["cycle_attempts"],
            "lease_token": None,
            "lease_until": None,
            "updated_at": now,
        }
        _check_fenced(await dispatch.settle_many(tx.conn, [(row["id"], claim.token, values)]), 1)
        await self._after_settle(tx, s, now)
        await audit.insert_deliveries(
            tx.conn,
            [
                audit.delivery_record(
                    row, status=decision.status.value, outcome=outcome, delivered_at=None, now=now
                )
            ],
        )
        s.final = _event(
            row,
            EventKind.DELIVERY_RESULT,
            {
                **base,
                "status": decision.status.value,
                "dead_letter": decision.dead_letter,
                "outcome": outcome,
                # The interrupted attempt settles here, on behalf of its lost lease.
                "interrupted": decision.interrupted,
                "lease_token": row["lease_token"],
                "provider_effect_may_have_occurred": decision.interrupted,
            },
        )
        log.warning(
            "interrupted last attempt: settled as exhausted",
            extra={"notification_id": row["id"], "attempt": claim.attempt, "cycle": row["cycle"]},
        )
        tx.signal(TOPIC_WORK)  # this claim took a slot without filling it: claim again
        return s

    async def deliver(self, claim: Claim) -> None:
        row = claim.row
        nid = row["id"]
        started = time.monotonic()
        outcome = "error"
        with tracing.attempt_span(
            self._tracer,
            notification_id=nid,
            attempt=claim.attempt,
            cycle=row["cycle"],
            trace_context=row["notification"].get("trace_context"),
        ) as span:
            try:
                if len(claim.channels) == 1:  # the common case: no task for the gather
                    attempts = [await self._send(claim, claim.channels[0])]
                else:
                    attempts = await asyncio.gather(
                        *(self._send(claim, ch) for ch in claim.channels)
                    )
                status = await self._settle_batched(claim, attempts)
                outcome = "lease_lost" if status is None else _ATTEMPT_OUTCOME[status]
                span.set_attribute("uns.outcome", outcome)
                lost = status is None
                log.log(
                    _ATTEMPT_LOG_LEVEL[outcome],
                    "lease lost before settling" if lost else "delivery attempt settled",
                    extra={
                        "notification_id": nid,
                        "attempt": claim.attempt,
                        "cycle": row["cycle"],
                        "outcome": outcome,
                    },
                )
            finally:
                self._metrics.attempt(outcome, time.monotonic() - started)

    @phased(PROVIDER)
    async def _send(self, claim: Claim, channel_name: str) -> Attempt:
        nid = claim.row["id"]
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
            result = ChannelResult.permanent(f"channel {channel_name!r} is not configured")
        else:
            try:
                async with asyncio.timeout(
                    self._lease.total_seconds() * SEND_TIMEOUT_SHARE_OF_LEASE
                ):
                    result = await self._channels.get(channel_name).send(
                        _message(claim, channel_name, self._links, self._clock())
                    )
            except TimeoutError:
                result = ChannelResult.transient("provider call timed out")
            except Exception as exc:  # an adapter bug must not lose the obligation
                log.exception(
                    "channel adapter raised",
                    extra={"channel": channel_name, "notification_id": claim.row["id"]},
                )
                result = ChannelResult.transient(f"adapter error: {type(exc).__name__}")
        return result

    async def _settle_batched(self, claim: Claim, attempts: Sequence[Attempt]) -> Status | None:
        """Record the delivery's outcome, in one transaction with every other delivery
        that finishes while the previous settle transaction is in flight."""
        status, _batch_size = await self._settler.submit((claim, attempts))
        return status

    @phased(SETTLE)
    async def _settle_many_durably(
        self, items: Sequence[tuple[Claim, Sequence[Attempt]]]
    ) -> list[Status | Exception | None]:
        """Settle many deliveries in one transaction, retried while the database is
        unreachable: the providers have answered, and their answers must be recorded
        (seed 004: retry only the database write, never the provider call). A retry
        first checks whether an earlier try committed after all (its acknowledgement
        lost), so nothing is recorded twice. One result per item: its status (None:
        the lease was lost), or the exception that settling it alone raised (a batch
        that fails for any other reason than an unreachable database is retried one
        delivery per transaction, so one bad row cannot hold back the others)."""
        delay = SETTLE_RETRY_DELAY_SECONDS
        give_up = time.monotonic() + SETTLE_RETRY_SECONDS_MAX
        results: dict[int, Status | Exception | None] = {}
        todo = list(range(len(items)))
        retrying = False
        while True:
            try:
                if retrying:
                    todo = await self._not_settled_before(items, todo, results)
                if todo:
                    statuses = await self._settle_batch([items[i] for i in todo])
                    results.update(zip(todo, statuses, strict=True))
                return [results[i] for i in range(len(items))]
            except Exception as exc:
                unreachable = is_unreachable(exc)
                if unreachable and time.monotonic() < give_up:
                    log.warning(
                        "database unreachable while settling; retrying",
                        extra={
                            "notification_ids": [items[i][0].row["id"] for i in todo],
                            "retry_in_seconds": delay,
                        },
                    )
                elif len(todo) > 1 and not unreachable:
                    # Not committed (the transaction raised before or at COMMIT); unless
                    # its acknowledgement was lost, so check like an unreachable retry.
                    log.warning("batched settlement failed; settling one by one", exc_info=True)
                    todo = await self._not_settled_before(items, todo, results)
                    for i in todo:
                        try:
                            [results[i]] = await self._settle_many_durably([items[i]])
                        except Exception as one:
                            results[i] = one
                    return [results[i] for i in range(len(items))]
                else:
                    raise
            retrying = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, SETTLE_RETRY_DELAY_SECONDS_MAX)

    async def _not_settled_before(
        self,
        items: Sequence[tuple[Claim, Sequence[Attempt]]],
        todo: Sequence[int],
        results: dict[int, Status | Exception | None],
    ) -> list[int]:
        """Of ``todo``, the items whose settlement has not committed; the others get
        their current status in ``results``."""
        async with self._db.read() as conn:
            recorded = await dispatch.results_recorded_for(
                conn, [(items[i][0].row["id"], items[i][0].token) for i in todo]
            )
        remaining = []
        for i in todo:
            claim = items[i][0]
            if claim.token in recorded:
                results[i] = await self._status_now(claim)
            else:
                remaining.append(i)
        return remaining

    async def _status_now(self, claim: Claim) -> Status | None:
        async with self._db.read() as conn:
            row = await notifications.by_id(conn, claim.row["id"])
        return Status(row["status"]) if row is not None else None

    async def _settle_batch(
        self, items: Sequence[tuple[Claim, Sequence[Attempt]]]
    ) -> list[Status | None]:
        """Commit the outcomes of many deliveries in one transaction; per item, the new
        status, or None when its lease was lost. Fencing is per row: a row whose lease
        was lost gets LEASE_LOST and the others still settle."""
        now = self._clock()
        settled: list[_Settled] = []
        async with self._db.write() as tx:
            current = await dispatch.leased_many(
                tx.conn, [(claim.row["id"], claim.token) for claim, _ in items], now
            )
            updates: list[tuple[str, str, dict[str, Any]]] = []
            audits: list[dict[str, Any]] = []
            for claim, attempts in items:
                row = claim.row
                base = {
                    "attempt": claim.attempt,
                    "cycle": row["cycle"],
                    "cycle_attempt": claim.cycle_attempt,
                }
                s = _Settled(claim, base)
                s.results = [
                    _event(
                        row,
                        EventKind.CHANNEL_ATTEMPT_RESULT,
                        {
                            **base,
                            "lease_token": claim.token,
                            "channel": a.channel,
                            "success": a.result.success,
                            "retryable": a.result.retryable,
                            "message_id": a.result.message_id,
                            "error": a.result.error,
                            "metadata": dict(a.result.metadata),
                            "provider_observed_at": a.observed_at.isoformat(),
                            **_reference_payload(claim, a),
                        },
                    )
                    for a in attempts
                ]
                leased = current.get(row["id"])
                if leased is not None and leased["lease_token"] != claim.token:
                    leased = None  # a later attempt on the same row holds the lease
                if leased is None:
                    s.final = _event(
                        row,
                        EventKind.LEASE_LOST,
                        {
                            "lease_token": claim.token,
                            "attempt": claim.attempt,
                            "provider_effect_may_have_occurred": True,
                        },
                    )
                else:
                    s.row = leased
                    values = self._decide(tx, leased, claim, attempts, s, now)
                    refs = _provider_refs(leased, claim, attempts)
                    if refs is not None:
                        values["provider_refs"] = refs
                    updates.append((leased["id"], claim.token, values))
                    audits.append(
                        audit.delivery_record(
                            leased,
                            status=values["status"],
                            outcome=values["outcome"],
                            delivered_at=values.get("delivered_at"),
                            now=now,
                        )
                    )
                settled.append(s)
            _check_fenced(await dispatch.settle_many(tx.conn, updates), len(updates))
            for s in settled:
                if s.row is not None and s.status is not None:
                    await self._after_settle(tx, s, now)
            await audit.insert_deliveries_before_events(tx, audits)
            await append(tx, [e for s in settled for e in s.events()], now)
        # Committed: count each outcome where it was decided.
        for s in settled:
            self._count_settled(s, now)
        return [s.status for s in settled]

    def _count_settled(self, s: _Settled, now: datetime) -> None:
        row = s.claim.row
        self._metrics.settled(
            s.status,
            dead_letter=s.dead_letter,
            delivery_mode=row["delivery_mode"],
            followers_deduplicated=sum(e.kind == EventKind.DEDUP_SATISFIED for e in s.followers),
            accept_to_settle_seconds=(now - row["created_at"]).total_seconds(),
        )

    def _decide(
        self,
        tx: WriteTx,
        row: Row,
        claim: Claim,
        attempts: Sequence[Attempt],
        s: _Settled,
        now: datetime,
    ) -> dict[str, Any]:
        """The new column values of a row whose lease is still held: the domain
        decides (``lifecycle.decide_settlement``), this records it."""
        effective = row["notification"]["effective"]
        settling = lifecycle.Settling(
            channels=tuple(effective["channels"]),
            succeeded_before=tuple(row["outcome"].get("channels_succeeded", [])),
            cycle_attempt=claim.cycle_attempt,
            max_attempts=row["max_attempts"],
            delivery_mode=row["delivery_mode"],
            require_ack=bool(row["require_ack"]),
            ack_timeout_minutes=int(effective["ack_timeout_minutes"]),
            quiet_hours=(
                schedule.QuietHours.from_json(effective["quiet_hours"])
                if effective.get("quiet_hours")
                else None
            ),
            intent=row["notification"].get("intent"),
        )
        answers = [
            lifecycle.ChannelAnswer(
                a.channel,
                a.result.success,
                a.result.retryable,
                a.result.error,
                a.result.retry_after_seconds,
            )
            for a in attempts
        ]
        decision = lifecycle.decide_settlement(settling, answers, now, rand=self._rand)
        if decision.status == Status.PENDING:
            tx.signal(TOPIC_WORK)
        s.status, s.dead_letter = decision.status, decision.dead_letter
        s.final = _event(row, EventKind.DELIVERY_RESULT, decision.result_payload(s.base))
        return decision.values(now)

    async def _after_settle(self, tx: WriteTx, s: _Settled, now: datetime) -> None:
        """Followers of a settled leader: satisfied by its delivery, or handed its
        obligation when it failed."""
        assert s.row is not None
        if s.status == Status.DELIVERED:
            await self._satisfy_followers(tx, s.row, now, s.followers)
        elif s.status == Status.FAILED:
            await self._hand_off(tx, s.row, now, s.followers)

    async def _satisfy_followers(
        self, tx: WriteTx, row: Row, now: datetime, new_events: list[NewEvent]
    ) -> None:
        if row["dedup_key"] is None:
            return
        window = int(row["notification"]["effective"]["dedup_window_seconds"])
        await notifications.update_dedup_window(
            tx.conn, row["dedup_key"], owner_id=row["id"], until=now + timedelta(seconds=window)
        )
        followers = await dispatch.pending_followers(tx.conn, row["id"])
        await dispatch.update_rows(
            tx.conn, [f["id"] for f in followers], status=Status.DEDUPLICATED.value, updated_at=now
        )
        new_events.extend(
            _event(
                f,
                EventKind.DEDUP_SATISFIED,
                {
                    "previous_owner_id": row["id"],
                    "owner_id": row["id"],
                    "generation": f["dedup_generation"],
                },
            )
            for f in followers
        )

    async def _hand_off(
        self, tx: WriteTx, row: Row, now: datetime, new_events: list[NewEvent]
    ) -> None:
        """The exhausted leader's obligation passes to its first pending follower, or
        else to a newer active owner of its dedup key (``lifecycle.decide_hand_off``)."""
        followers = await dispatch.pending_followers(tx.conn, row["id"])
        owner = None
        if not followers and row["dedup_key"] is not None:
            owner = await self._window_owner(tx, row["dedup_key"])
        decision = lifecycle.decide_hand_off(
            leader_id=row["id"],
            leader_generation=row["dedup_generation"],
            pending_followers=[
                lifecycle.Follower(f["id"], f["dedup_generation"]) for f in followers
            ],
            window_owner=owner,
            now=now,
        )
        if decision is None:
            return
        await dispatch.update_rows(tx.conn, [row["id"]], dedup_successor_id=decision.successor_id)
        new_events.append(
            _event(
                row,
                EventKind.OBLIGATION_HANDED_OFF,
                {"successor_id": decision.successor_id, "generation": decision.generation},
            )
        )
        if not decision.promoted:  # the newer owner already leads its own window
            return
        successor, rest = followers[0], followers[1:]
        await dispatch.update_rows(
            tx.conn, [successor["id"]], dedup_owner_id=None, next_attempt=now, updated_at=now
        )
        await dispatch.update_rows(
            tx.conn, list(decision.relinked), dedup_owner_id=successor["id"], updated_at=now
        )
        await notifications.update_dedup_window(tx.conn, row["dedup_key"], owner_id=successor["id"])
        link = {
            "previous_owner_id": row["id"],
            "owner_id": successor["id"],
            "generation": decision.generation,
        }
        new_events.append(_event(successor, EventKind.DEDUP_OWNER_PROMOTED, link))
        new_events.extend(_event(f, EventKind.DEDUP_RELINKED, link) for f in rest)
        tx.signal(TOPIC_WORK)

    async def _window_owner(self, tx: WriteTx, dedup_key: str) -> lifecycle.DedupOwner | None:
        """The current owner of a dedup window (the window locked, as intake locks it)."""
        window = await notifications.dedup_window(tx.conn, dedup_key)
        if window is None or not window["owner_id"]:
            return None
        owner = await notifications.by_id(tx.conn, window["owner_id"])
        if owner is None or owner["dedup_generation"] is None:
            return None
        return lifecycle.DedupOwner(
            owner["id"], Status(owner["status"]), owner["dedup_generation"], window["until"]
        )


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


def _check_fenced(changed: int, expected: int) -> None:
    """Every settlement's row is locked under its lease (claimed, or ``leased_many``),
    so each must change it; if one did not, roll back rather than record events for a
    settlement that did not happen (its lease expires and is recovered)."""
    if changed != expected:
        raise RuntimeError(f"fenced settlement changed {changed} of {expected} rows")


def _reference(claim: Claim, attempt: Attempt) -> dict[str, Any] | None:
    """The provider reference of a successful channel attempt, with where it came from."""
    if not attempt.result.success:
        return None
    return {
        **attempt.result.reference,
        "channel": attempt.channel,
        "message_id": attempt.result.message_id or "",
        "attempt": claim.attempt,
        "cycle": claim.row["cycle"],
        "at": attempt.observed_at.isoformat(),
    }


def _reference_payload(claim: Claim, attempt: Attempt) -> dict[str, Any]:
    ref = _reference(claim, attempt)
    return {} if ref is None else {"provider_reference": ref}


def _provider_refs(row: Row, claim: Claim, attempts: Sequence[Attempt]) -> dict[str, Any] | None:
    """The row's provider references with this attempt's successes; None if unchanged."""
    new = {a.channel: ref for a in attempts if (ref := _reference(claim, a)) is not None}
    if not new:
        return None
    return {**(row.get("provider_refs") or {}), **new}


def _remaining_channels(row: Row) -> tuple[str, ...]:
    done = set(row["outcome"].get("channels_succeeded", []))
    return tuple(ch for ch in row["notification"]["effective"]["channels"] if ch not in done)


def _claim_events(claim: Claim, *, recovered: bool) -> list[NewEvent]:
    """What a claim commits before any provider I/O: ATTEMPT_STARTED, and one
    CHANNEL_ATTEMPT_STARTED per channel still to deliver."""
    row = claim.row
    base = {"attempt": claim.attempt, "cycle": row["cycle"], "cycle_attempt": claim.cycle_attempt}
    started = _event(
        row, EventKind.ATTEMPT_STARTED, {**base, "recovery_may_repeat_provider_effect": recovered}
    )
    return [started] + [
        _event(
            row,
            EventKind.CHANNEL_ATTEMPT_STARTED,
            {
                **base,
                "channel": ch,
                "lease_token": claim.token,
                "provider_effect_may_have_occurred": True,
            },
        )
        for ch in claim.channels
    ]


def _event(row: Row, kind: EventKind, payload: dict[str, Any]) -> NewEvent:
    return NewEvent(row["id"], row["principal"], row["notification_type"], kind, payload)


def _message(
    claim: Claim, channel: str, links: ActionLinkService | None, now: datetime
) -> OutboundMessage:
    row = claim.row
    make_links = None
    if links is not None and row["require_ack"]:
        minutes = int(row["notification"]["effective"]["ack_timeout_minutes"])
        make_links = links.for_message(row["id"], minutes, now)
    return outbound_message(
        row,
        attempt=claim.attempt,
        # Stable across retries of one cycle, so providers can drop duplicates.
        idempotency_token=f"{row['id']}:{channel}:{row['cycle']}",
        links=make_links,
    )
