"""Settler: record what the providers answered, fenced by the lease token.

Deliveries that finish while a settle transaction is in flight are settled together
in the next one (``submit``; one fenced executemany per kind of update, which also
takes the row locks, and one events append carrying the audit rows; on PostgreSQL the
updates ride in that append too, and a lone delivery's settle is that one statement).
Fencing stays per row: a row whose lease was lost gets LEASE_LOST while the others in the batch
settle. The domain decides each row's move (``lifecycle.decide_settlement``); this
records it, with the followers' part (``followers``). A claim whose interrupted
attempt was the cycle's last is settled here too, inside the claim's transaction
(``settle_exhausted``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from uns_server.batching import GroupCommit
from uns_server.domain import lifecycle, moves
from uns_server.domain.enums import EventKind, Status
from uns_server.domain.records import Notification
from uns_server.observability.metrics import Metrics
from uns_server.observability.phases import SETTLE, phased
from uns_server.store.port import (
    TOPIC_WORK,
    DeliveryAudit,
    FenceMoved,
    NewEvent,
    Store,
    WriteTransaction,
)
from uns_server.workers.dispatch.claims import ChannelAttempt, Claim, attempt_base, event
from uns_server.workers.dispatch.followers import after_settle
from uns_server.workers.dispatch.references import held_json, provider_refs, result_event

log = logging.getLogger("uns.dispatch")

# How long a worker keeps trying to record a provider's answer while the database is
# unreachable (past it, the lease expires and the attempt is recovered as usual).
SETTLE_RETRY_SECONDS_MAX = 120.0
SETTLE_RETRY_DELAY_SECONDS = 0.25
SETTLE_RETRY_DELAY_SECONDS_MAX = 5.0
# Most deliveries settled in one transaction (the rest wait for the next one).
SETTLE_BATCH_MAX = 64

Item = tuple[Claim, Sequence[ChannelAttempt]]


@dataclass
class Settled:
    """One delivery's part of a settle transaction."""

    claim: Claim
    base: dict[str, Any]
    leased: Notification | None = None  # as locked to settle; None when the lease was lost
    status: Status | None = None
    dead_letter: bool = False
    results: list[NewEvent] = field(default_factory=list)
    followers: list[NewEvent] = field(default_factory=list)
    final: NewEvent | None = None  # DELIVERY_RESULT or LEASE_LOST

    def events(self) -> list[NewEvent]:
        return [*self.results, *self.followers, *([self.final] if self.final else [])]


class Settler:
    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        *,
        rand: Callable[[], float],
        metrics: Metrics,
        max_throttle_deferrals: int = lifecycle.THROTTLE_DEFERRALS_MAX_DEFAULT,
    ) -> None:
        self._store = store
        self._clock = clock
        self._rand = rand
        self._max_throttle_deferrals = max_throttle_deferrals
        self._metrics = metrics
        self._committer: GroupCommit[Item, Status | None] = GroupCommit(
            self.settle_many_durably, max_batch=SETTLE_BATCH_MAX
        )

    async def submit(self, claim: Claim, attempts: Sequence[ChannelAttempt]) -> Status | None:
        """Record the delivery's outcome, in one transaction with every other delivery
        that finishes while the previous settle transaction is in flight. The new
        status, or None when the lease was lost."""
        status, _batch_size = await self._committer.submit((claim, attempts))
        return status

    async def close(self) -> None:
        await self._committer.close()

    @phased(SETTLE)
    async def settle_many_durably(self, items: Sequence[Item]) -> list[Status | Exception | None]:
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
                    statuses = await self.settle_batch([items[i] for i in todo])
                    results.update(zip(todo, statuses, strict=True))
                return [results[i] for i in range(len(items))]
            except Exception as exc:
                unreachable = self._store.is_unreachable(exc)
                if unreachable and time.monotonic() < give_up:
                    log.warning(
                        "database unreachable while settling; retrying",
                        extra={
                            "notification_ids": [items[i][0].notification.id for i in todo],
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
                            [results[i]] = await self.settle_many_durably([items[i]])
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
        items: Sequence[Item],
        todo: Sequence[int],
        results: dict[int, Status | Exception | None],
    ) -> list[int]:
        """Of ``todo``, the items whose settlement has not committed; the others get
        their current status in ``results``."""
        async with self._store.read() as tx:
            recorded = await tx.dispatch.results_recorded_for(
                [(items[i][0].notification.id, items[i][0].token) for i in todo]
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
        async with self._store.read() as tx:
            return await tx.dispatch.status_of(claim.notification.id)

    async def settle_batch(self, items: Sequence[Item]) -> list[Status | None]:
        """``settle_batch_once``; on PostgreSQL first with the fenced UPDATEs riding in
        the events append (``Dispatch.settle_leased_with_events``: BEGIN, one
        statement, COMMIT; for one delivery the statement alone, ``Store.one_statement``).
        If a lease turned out lost, that write takes nothing and the batch is settled
        again the long way, where each row gets its own outcome.
        (SQLite has no round trips to save: it goes the long way at once.)"""
        try:
            return await self.settle_batch_once(items, riding=self._store.settles_with_events)
        except FenceMoved:
            return await self.settle_batch_once(items, riding=False)

    async def settle_batch_once(
        self, items: Sequence[Item], *, riding: bool
    ) -> list[Status | None]:
        """Commit the outcomes of many deliveries in one transaction; per item, the new
        status, or None when its lease was lost. Fencing is per row: a row whose lease
        was lost gets LEASE_LOST and the others still settle.

        Each row's move is decided from the claim's copy of it, and the fenced UPDATE
        (``Dispatch.settle_leased``: token and unexpired lease in its WHERE) takes the
        row lock: no read of the row first. The copy is as good as the row: of the
        columns the settlement reads (the policy snapshot, ``outcome``,
        ``max_attempts``, ``delivery_mode``, ``require_ack``, ``provider_refs``, the
        dedup key and generation, ``cycle``), only a settlement writes any while a
        lease is held. The claim writes only lease and attempt columns; a withdrawal
        clears the lease (so the UPDATE finds no row); acks and follow-ups touch
        delivered rows' ack columns, but an answer while the attempt is in flight sets
        the ack (kept: ``KEPT_ONCE_SET``); a replay or a resolution only dead letters;
        followers' hand-offs change other rows. A row the UPDATE did not change lost
        its lease, and its decision is dropped."""
        now = self._clock()
        settled: list[Settled] = []
        updates: list[moves.SettleAttempt] = []
        audits: list[DeliveryAudit] = []  # one per update, in order
        work = False
        for claim, attempts in items:
            s = Settled(claim, attempt_base(claim))
            s.results = [result_event(s.claim, s.base, a) for a in attempts]
            n = claim.notification
            decision = self._decide(n, claim, attempts, s, now)
            work = work or decision.status == Status.PENDING
            refs = provider_refs(n, claim, attempts)
            cycle = n.cycle_attempts if decision.gives_back_attempt else claim.cycle_attempt
            updates.append(
                moves.SettleAttempt(n.id, claim.token, decision, claim.attempt, cycle, refs)
            )
            audits.append(
                DeliveryAudit(n, decision.status, decision.outcome, decision.delivered_at)
            )
            settled.append(s)
        riding = riding and all(_settles_alone(s) for s in settled)
        # One delivery that settles alone is one statement, without BEGIN and COMMIT
        # (its fenced UPDATE moves its one row or nothing, so the statement writes all
        # or nothing). A batch keeps its transaction: one fenced row could fall short
        # while the others moved, and only a rollback takes those back.
        single = riding and len(settled) == 1
        async with self._store.one_statement() if single else self._store.write() as tx:
            if work:
                tx.signal(TOPIC_WORK)
            if riding:
                # Every lease is expected to hold: FenceMoved (a rollback) if one did not.
                await tx.dispatch.settle_leased_with_events(updates, now)
                changed = {(s.claim.notification.id, s.claim.token) for s in settled}
            else:
                changed = await tx.dispatch.settle_leased(updates, now)
            kept = []
            for s, record in zip(settled, audits, strict=True):
                claim = s.claim
                if (claim.notification.id, claim.token) in changed:
                    s.leased = claim.notification
                    kept.append(record)
                    continue
                s.status, s.dead_letter = None, False
                s.final = event(
                    claim.notification,
                    EventKind.LEASE_LOST,
                    {
                        "lease_token": claim.token,
                        "attempt": claim.attempt,
                        "provider_effect_may_have_occurred": True,
                    },
                )
            for s in settled:
                if s.leased is not None and s.status is not None:
                    await after_settle(tx, s.status, s.leased, now, s.followers)
            # The staged rules each landed attempt started (SPEC §7), in its commit.
            rules = [
                r.job(s.claim.notification.id) for s in settled if s.leased for r in s.claim.staged
            ]
            if rules:
                await tx.jobs.insert_many(rules, now)
            await tx.audit.record_deliveries(kept, now)
            await tx.events.append([e for s in settled for e in s.events()], now)
        # Committed: count each outcome where it was decided.
        for s in settled:
            self.count(s, now)
        return [s.status for s in settled]

    def count(self, s: Settled, now: datetime) -> None:
        n = s.claim.notification
        self._metrics.settled(
            s.status,
            dead_letter=s.dead_letter,
            delivery_mode=n.delivery_mode,
            followers_deduplicated=sum(e.kind == EventKind.DEDUP_SATISFIED for e in s.followers),
            accept_to_settle_seconds=(now - n.created_at).total_seconds(),
        )

    def _decide(
        self,
        n: Notification,
        claim: Claim,
        attempts: Sequence[ChannelAttempt],
        s: Settled,
        now: datetime,
    ) -> lifecycle.Settlement:
        """The settlement of a row whose lease is still held: the domain decides
        (``lifecycle.decide_settlement``), this records its events."""
        effective = n.notification.effective
        settling = lifecycle.Settling(
            # With targets: each person's routes resolved by this attempt, too.
            channels=tuple(dict.fromkeys((*effective.channels, *claim.channels))),
            succeeded_before=n.outcome.channels_succeeded,
            cycle_attempt=claim.cycle_attempt,
            max_attempts=n.max_attempts,
            delivery_mode=n.delivery_mode,
            require_ack=n.require_ack,
            ack_timeout_minutes=effective.ack_timeout_minutes,
            quiet_hours=effective.quiet_hours,
            follows_up=effective.spec.timing.follows_up,
            intent=n.notification.intent.value if n.notification.intent else None,
            held=claim.held,
            throttle_deferrals=n.outcome.throttle_deferrals,
            max_throttle_deferrals=self._max_throttle_deferrals,
        )
        answers = [
            lifecycle.ChannelAnswer(
                a.channel,
                a.result.success,
                a.result.retryable,
                a.result.error,
                a.result.retry_after_seconds,
                throttled=a.result.throttled,
                busy=a.busy,
            )
            for a in attempts
        ]
        decision = lifecycle.decide_settlement(settling, answers, now, rand=self._rand)
        if claim.unreachable:  # SPEC §6: recorded, never silently skipped
            decision.outcome["recipients_unreachable"] = list(claim.unreachable)
        if claim.held:  # SPEC §6: a person's quiet hours hold their message, visibly
            decision.outcome["held"] = held_json(claim)
        if claim.staged or n.outcome.staged:  # SPEC §7: people's staged rules, kept
            started = [*n.outcome.staged, *(r.entry() for r in claim.staged)]
            decision.outcome["staged"] = [dict(e) for e in started]
        s.status, s.dead_letter = decision.status, decision.dead_letter
        s.final = event(n, EventKind.DELIVERY_RESULT, decision.result_payload(s.base))
        return decision

    async def settle_exhausted(
        self, tx: WriteTransaction, claim: Claim, decision: lifecycle.SettleExhausted, now: datetime
    ) -> Settled:
        """Settle a claimed row with no attempt left (its last one was interrupted) as
        an exhausted retry would be, without calling any provider; the counters keep
        the consumed attempts (the claim's increment is undone). The caller appends
        its events and counts it (``count``) once the claim commits."""
        n = claim.notification  # locked by the claim, its lease ours
        base = attempt_base(claim)
        outcome = lifecycle.interrupted_outcome(
            attempt=claim.attempt,
            cycle=n.cycle,
            succeeded=n.outcome.channels_succeeded,
            unconfirmed=claim.channels,
        )
        s = Settled(claim, base, leased=n, status=decision.status, dead_letter=decision.dead_letter)
        exhaust = moves.ExhaustAttempt(
            n.id,
            claim.token,
            decision.status,
            decision.dead_letter,
            outcome,
            attempts=n.attempts,
            cycle_attempts=n.cycle_attempts,
        )
        check_fenced(await tx.dispatch.settle_many([exhaust], now), {n.id})
        await after_settle(tx, s.status, n, now, s.followers)
        await tx.audit.record_deliveries([DeliveryAudit(n, decision.status, outcome, None)], now)
        s.final = event(
            n,
            EventKind.DELIVERY_RESULT,
            {
                **base,
                "status": decision.status.value,
                "dead_letter": decision.dead_letter,
                "outcome": outcome,
                # The interrupted attempt settles here, on behalf of its lost lease.
                "interrupted": decision.interrupted,
                "lease_token": n.lease_token,
                "provider_effect_may_have_occurred": decision.interrupted,
            },
        )
        log.warning(
            "interrupted last attempt: settled as exhausted",
            extra={"notification_id": n.id, "attempt": claim.attempt, "cycle": n.cycle},
        )
        tx.signal(TOPIC_WORK)  # this claim took a slot without filling it: claim again
        return s


def _settles_alone(s: Settled) -> bool:
    """Does the settlement need no followers' part (``after_settle``), which reads and
    writes after the row's UPDATE?"""
    n = s.claim.notification
    if s.claim.staged:  # its staged rules' jobs are inserted after the UPDATE
        return False
    return s.status == Status.PENDING or (s.status == Status.DELIVERED and n.dedup_key is None)


def check_fenced(landed: frozenset[str], expected: set[str]) -> None:
    """A settlement's row, leased by its claim in this transaction, must change; if one
    did not, roll back rather than record events for a settlement that did not happen
    (its lease expires and is recovered)."""
    if landed != expected:
        raise RuntimeError(f"fenced settlement changed {sorted(landed)} of {sorted(expected)}")
