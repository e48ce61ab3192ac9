"""Follow-ups: reminders and escalation steps while an ack is PENDING (SPEC §5).

Each is a ``follow_up`` row of the work table (``domain.follow_up_jobs``): the
settlement that opens an ack inserts the first, each decided step the next. A round:

1. **Claim** (one transaction): claim due ``follow_up`` jobs,
   lock their notifications and ask ``domain.schedule.decide_follow_up`` what is due.
   Nothing due yet: the job completes and its successor is inserted, due then. The
   ack ended: the job completes (a step that waited to retry is closed STOPPED). A
   step due: the job stays running, its lease the step's. A step whose earlier claim
   was lost unsettled (``follow_up_jobs.recovered``) is decided again (the counters
   only move at settlement) and flagged ``provider_effect_may_have_occurred``.
2. **Send** outside any transaction, on the step's channels (a reminder: the
   notification's channels; a step: its own) that have not answered it yet for good,
   marked as a follow-up with its number.
   A snooze's end makes a job that carries the snooze's number: its step is the
   reminder that asks again (``schedule.snooze_reminder``, on a reminder's channels
   and targets; REMINDER_SENT with ``follow_up: SNOOZE_REMINDER``), decided like any
   step, after which the policy's next step is looked at as usual.
3. **Settle** (one transaction), the notification locked, asking
   ``domain.schedule.decide_step_attempt``, then the job's fenced settle: a channel
   that failed transiently (timeout, transport error, 429, 5xx) and attempts left
   before the deadline: the job retries at the backoff time and the row stores the
   step's progress (``followup_step``: calls made, each channel's latest answer),
   without an event. Otherwise the step is decided: the job completes, the row counts
   it and the next step's job is inserted; REMINDER_SENT or ESCALATED is recorded once,
   with every channel's result, the calls made and the ``decision`` (SENT, GAVE_UP;
   SKIPPED when nobody it asks is due now). A lost fence (the lease expired and was
   rescued, or a withdrawal cancelled the job) records LEASE_LOST with the results
   instead and changes nothing.

So each step is decided once across replicas and restarts and sent at least once per
channel (never again to a channel that accepted it); a repeat is flagged. Reminders and
steps stop once the ack is no longer PENDING (acknowledged, dismissed, timed out,
withdrawn): a job that falls due then does nothing but close a step waiting to retry.

The stored progress of a step and its event payload live in ``followup_progress``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from uns_server.channels.base import ChannelResult
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain import follow_up_jobs, moves, schedule, snooze
from uns_server.domain.enums import AckStatus, EventKind
from uns_server.domain.jobs import JobState, NewJob, SettleJob
from uns_server.domain.moves import MoveLost
from uns_server.domain.records import Job, Notification
from uns_server.services import staging
from uns_server.services.action_links import ActionLinkService
from uns_server.store.port import NewEvent, Store, WriteTransaction
from uns_server.workers.followup_messages import (
    NOBODY,
    FollowUpClaim,
    Sent,
    ask,
    follow_up_refs,
    message,
)
from uns_server.workers.followup_progress import (
    NUMBER_FIELD,
    progress_of,
    result_json,
    snooze_step,
    step_of,
    step_payload,
    timing_of,
)
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.messages import send_built
from uns_server.workers.provider_call import guarded_call
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.followups")
Clock = Callable[[], datetime]

BATCH_DEFAULT = 64
KINDS = (follow_up_jobs.KIND,)
_KIND_EVENT = {
    schedule.StepKind.REMINDER: EventKind.REMINDER_SENT,
    schedule.StepKind.ESCALATION: EventKind.ESCALATED,
    schedule.StepKind.SNOOZE_REMINDER: EventKind.REMINDER_SENT,  # its payload says so
}


@dataclass(frozen=True)
class FollowUpRound:
    fired: int  # steps sent and settled (or fenced)
    rescheduled: int  # rows looked at with nothing due yet
    more: bool = False  # a full batch: look again at once
    due_in: float | None = None  # until the next follow-up falls due


class FollowUpWorker(LoopWorker):
    name = "followups"  # repeated faults turn health NOT_SERVING
    kinds = frozenset(KINDS)  # the rescuer wakes it when it makes one due

    def __init__(
        self,
        store: Store,
        channels: ChannelRegistry,
        clock: Clock,
        *,
        lease_seconds: float,
        poll_seconds: float,
        batch_size: int = BATCH_DEFAULT,
        rand: Callable[[], float] = random.random,
        links: ActionLinkService | None = None,
        supervision: Supervision | None = None,
    ) -> None:
        super().__init__(poll_seconds, supervision)
        self._store = store
        self._rand = rand
        self._links = links  # Acknowledge/Dismiss links in reminders (HTTP surface on)
        self._channels = channels
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)
        self._batch = batch_size

    async def run_once(self) -> FollowUpRound:
        """Claim one batch and send what is due to completion; then, unless the batch
        was full, read when the next follow-up falls due."""
        claims, rescheduled = await self.claim()
        await asyncio.gather(*(self.deliver(c) for c in claims))
        if claims:
            log.info("follow-ups sent", extra={"count": len(claims)})
        if len(claims) + rescheduled >= self._batch:
            return FollowUpRound(len(claims), rescheduled, more=True)
        async with self._store.read() as tx:
            due = await tx.jobs.next_due_at(KINDS)
        return FollowUpRound(len(claims), rescheduled, due_in=seconds_until(due, self._clock()))

    async def claim(self) -> tuple[list[FollowUpClaim], int]:
        """Claim due ``follow_up`` jobs: the steps due now stay leased; the others are
        done (rescheduled, or closed)."""
        now = self._clock()
        claims: list[FollowUpClaim] = []
        done: list[SettleJob] = []
        later: list[NewJob] = []
        async with self._store.write() as tx:
            await tx.follow_ups.carry(now, limit=self._batch)
            jobs = await tx.jobs.claim(KINDS, now=now, limit=self._batch, lease=self._lease)
            rows = await tx.acks.locked(
                {job.notification_id for job in jobs if job.notification_id}
            )
            for job in jobs:
                n = rows.get(job.notification_id or "")
                if n is None or n.ack_status != AckStatus.PENDING:
                    if n is not None and n.followup_step is not None:
                        # The ack ended while a step waited to retry: record that step.
                        await self._close_stopped(tx, n, job, now)
                    done.append(follow_up_jobs.done(job))
                    continue
                timing, intent = timing_of(n)
                owed = follow_up_jobs.snooze_reminder_of(job)
                if owed is not None and owed != n.snoozes_ended:
                    done.append(follow_up_jobs.done(job))  # a later snooze's job asks
                    continue
                step = snooze_step(n, owed, snooze.reminder_due(n, job.created_at), timing)
                if step is not None and progress_of(n) not in (None, progress_of(n, step)):
                    # A step left waiting to retry by the pause: the snooze stopped it.
                    await self._close_stopped(tx, n, job, now)
                if step is None:
                    decision = schedule.decide_follow_up(
                        delivered_at=delivered_at(n),
                        timing=timing,
                        intent=intent,
                        reminders_sent=n.reminders_sent,
                        escalations_sent=n.escalations_sent,
                        now=now,
                    )
                    if isinstance(decision, schedule.Wait):
                        done.append(follow_up_jobs.done(job))
                        if decision.at is not None:
                            later.append(follow_up_jobs.timer(n.id, decision.at))
                        await tx.follow_ups.look_again(n.id, decision.at)
                        continue
                    step = decision.step
                progress = progress_of(n, step)
                answers = progress.answers() if progress else {}
                channels = tuple(
                    ch for ch in step.channels if ch not in answers or answers[ch].transient
                )
                assert job.lease_token is not None, "a claimed job holds a lease"
                recovered = follow_up_jobs.recovered(job, progress.calls if progress else 0)
                claims.append(
                    FollowUpClaim(
                        n,
                        job.lease_token,
                        step,
                        recovered,
                        channels or step.channels,
                        job_id=job.id,
                    )
                )
            # Claimed in this transaction: a lost settle is a bug, nothing may commit.
            landed = await tx.jobs.settle_many(done, now)
            if len(landed) != len(done):
                raise MoveLost(f"follow-ups: {len(landed)} of {len(done)} jobs settled")
            await tx.jobs.insert_many(later, now)
        return claims, len(done)

    async def _close_stopped(
        self, tx: WriteTransaction, n: Notification, job: Job, now: datetime
    ) -> None:
        progress = progress_of(n)
        counts = moves.FollowUpCounts(n.reminders_sent, n.escalations_sent)
        if progress is None:
            return
        if follow_up_jobs.recovered(job, progress.calls):  # a call lost unsettled
            progress = dataclasses.replace(progress, recovered=True)
        timing, intent = timing_of(n)
        step = step_of(progress, timing)
        decided = schedule.decide_step_attempt(
            channels=step.channels,
            answers=progress.answers(),
            attempts=progress.calls,
            max_attempts=n.max_attempts,
            ack_pending=False,
            now=now,
            deadline=n.deadline or now,
            quiet=timing.quiet,
            intent=intent,
            rand=self._rand,
        )
        assert isinstance(decided, schedule.StepDecided)
        counts = counts.after(step.kind, step.number)
        await tx.follow_ups.record_step(moves.SettleFollowUpStep(n.id, counts, None, None, now))
        payload = step_payload(step, progress, decided.outcome, lease_token=None)
        await tx.events.append([_event(n, _KIND_EVENT[step.kind], payload)], now)

    async def deliver(self, claim: FollowUpClaim) -> None:
        try:
            claim = await ask(self._store, claim, self._channels.names(), self._clock())
            # With targets, ``ask`` says exactly what to call (maybe nothing).
            channels = (
                claim.channels if claim.step.targets else claim.channels or claim.step.channels
            )
            sent = await asyncio.gather(*(self._send(claim, ch) for ch in channels))
            await self.settle(claim, sent)
        except Exception:
            # The lease expires and the step is recovered (and flagged) by a later claim.
            log.exception("follow-up failed", extra={"notification_id": claim.notification.id})

    async def _send(self, claim: FollowUpClaim, channel: str) -> Sent:
        route = claim.route(channel)
        target = route.channel if route else channel
        if channel == NOBODY:
            reason = "; ".join(str(u) for u in claim.unreachable) or "the targets ask nobody"
            return Sent(channel, ChannelResult.permanent(f"no target can be reached: {reason}"))
        if target not in self._channels:
            return Sent(channel, ChannelResult.permanent(f"channel {target!r} is not configured"))
        result = await guarded_call(
            lambda: send_built(
                self._channels.get(target),
                message(claim, channel, self._links, self._channels.type_of(target)),
            ),
            lease=self._lease,
            log_extra={"channel": channel, "notification_id": claim.notification.id},
        )
        return Sent(channel, result)

    async def settle(self, claim: FollowUpClaim, sent: Sequence[Sent]) -> bool:
        """Record this call of the step: retried later, or decided (its one event).
        False when its lease was lost (nothing but LEASE_LOST)."""
        now = self._clock()
        n, step = claim.notification, claim.step
        results = {s.channel: result_json(s.result) for s in sent}
        async with self._store.write() as tx:
            current = (await tx.acks.locked([n.id])).get(n.id)
            if current is None:  # the notification is gone (retention): nothing to record
                await tx.jobs.settle_many(
                    [SettleJob(claim.job_id, claim.token, JobState.COMPLETED)], now
                )
                return False
            before = progress_of(current, step)
            progress = schedule.StepProgress(
                step.kind,
                step.number,
                step.at,
                (before.calls if before else 0) + 1,
                {**(before.results if before else {}), **results},
                claim.recovered or (before is not None and before.recovered),
            )
            timing, intent = timing_of(current)
            pending = current.ack_status == AckStatus.PENDING
            decision = schedule.decide_step_attempt(
                channels=step.channels,
                answers=progress.answers(),
                attempts=progress.calls,
                max_attempts=current.max_attempts,
                ack_pending=pending,
                now=now,
                deadline=current.deadline or now,
                quiet=timing.quiet,
                intent=intent,
                rand=self._rand,
            )
            if isinstance(decision, schedule.RetryStep):
                settle = follow_up_jobs.settle_retry(claim.job_id, claim.token, decision.at)
            else:
                settle = follow_up_jobs.settle_done(claim.job_id, claim.token)
            if not await tx.jobs.settle_many([settle], now):  # rescued, or withdrawn
                lost: dict[str, Any] = {
                    NUMBER_FIELD[step.kind]: step.number,
                    "follow_up": step.kind.value,
                    "channels": list(step.channels),
                    "results": list(results.values()),
                    "lease_token": claim.token,
                    "due_time": step.at.isoformat(),
                    "provider_effect_may_have_occurred": True,
                }
                await tx.events.append([_event(n, EventKind.LEASE_LOST, lost)], now)
                return False
            if pending and claim.staged:  # the people it first asked: their later rules
                await staging.start_for_step(tx, current, claim.staged, now)
            refs = follow_up_refs(current, claim, sent, now)  # closed later too
            if isinstance(decision, schedule.RetryStep):
                retry = moves.RetryFollowUpStep(n.id, progress, decision.at, refs, now)
                await tx.follow_ups.record_progress(retry)
                return True
            counts = moves.FollowUpCounts(current.reminders_sent, current.escalations_sent)
            counts = counts.after(step.kind, step.number)
            next_at = None
            if pending:
                next_at = schedule.after_fired(
                    delivered_at=delivered_at(current),
                    timing=timing,
                    intent=intent,
                    reminders_sent=counts.reminders_sent,
                    escalations_sent=counts.escalations_sent,
                )
            await tx.follow_ups.record_step(
                moves.SettleFollowUpStep(n.id, counts, next_at, refs, now)
            )
            if next_at is not None:
                await tx.jobs.insert_many([follow_up_jobs.timer(n.id, next_at)], now)
            payload = step_payload(
                step,
                progress,
                decision.outcome,
                lease_token=claim.token,
                people=claim.people,
                unreachable=claim.unreachable,
                waiting={"recipients_held": claim.held, "recipients_not_due": claim.not_due},
            )
            await tx.events.append([_event(n, _KIND_EVENT[step.kind], payload)], now)
        return True


def delivered_at(n: Notification) -> datetime:
    """When a notification whose ack is PENDING was delivered (its ack starts then)."""
    assert n.delivered_at is not None, "an ack is PENDING only once delivered"
    # Snoozes paused the timeline (``domain.snooze``): its steps move by every pause.
    return n.delivered_at + timedelta(seconds=n.snoozed_seconds)


def _event(n: Notification, kind: EventKind, payload: dict[str, Any]) -> NewEvent:
    return NewEvent(n.id, n.principal, n.notification_type, kind, payload)
