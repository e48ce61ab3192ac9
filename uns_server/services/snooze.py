"""Snooze (SPEC §7): ``SnoozeNotification`` and the end of each snooze; the rules are
``domain.snooze``.

    PENDING | SNOOZED --SnoozeNotification--> SNOOZED  (whoever may answer; SNOOZED event)
    SNOOZED --its snooze_end job, the timers worker--> PENDING  (SNOOZE_ENDED event)

A snooze commits its new state, the ack audit record, its event and its timers (the
end, the moved deadline) together. Its end is a ``snooze_end`` job that the timers
worker (``workers.timers``) claims, fires and completes in one transaction with the
ack deadlines (``fire_ends``): the ack PENDING again, and a ``follow_up`` job due at once
that asks the person again (the snooze's reminder, sent by ``workers.followups``) and
then resumes the reminders and escalation steps (their times shifted by the pauses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from uns_server.domain import follow_up_jobs, snooze
from uns_server.domain.enums import AckStatus, EventKind
from uns_server.domain.errors import AckConflict, AckDeadlinePassed, AckNotPending, NotFound
from uns_server.domain.moves import MoveLost
from uns_server.domain.records import Job, Notification
from uns_server.domain.validation import validate_notification_id
from uns_server.services.acks import (
    VIA_EXPIRY,
    VIA_GRPC,
    Answer,
    Receipt,
    ack_target,
    recipient_of,
)
from uns_server.services.auth import Principal
from uns_server.store.port import NewEvent, Store, WriteTransaction

END_ACTOR = "uns-snooze-worker"


class Snoozes:
    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def snooze(
        self, principal: Principal, notification_id: str, duration: timedelta
    ) -> Notification:
        """``SnoozeNotification``: tenancy first (NOT_FOUND as for an unknown id), then
        the answer's rules (``domain.snooze.decide_snooze``)."""
        nid = validate_notification_id(notification_id)
        snooze.check_duration(duration)
        async with self._store.write() as tx:
            row = await tx.notifications.get_locked(nid)
            if row is None or not principal.may_read(row.principal):
                raise NotFound(metadata={"notification_id": nid})
            await self._snooze(tx, row, principal.name, VIA_GRPC, duration, {})
            snoozed = await tx.notifications.get(nid)
        assert snoozed is not None
        return snoozed

    async def snooze_as(
        self, notification_id: str, *, actor: str, via: str, duration: timedelta
    ) -> Notification:
        """A snooze from outside gRPC (a signed link, a provider's button) by ``actor``,
        who has already proven the right to answer."""
        snoozed = await self.try_snooze_as(notification_id, actor=actor, via=via, duration=duration)
        if snoozed.refusal is not None:
            raise snoozed.refusal
        assert snoozed.row is not None
        return snoozed.row

    async def try_snooze_as(
        self,
        notification_id: str,
        *,
        actor: str,
        via: str,
        duration: timedelta,
        metadata: Mapping[str, str] | None = None,
        receipt: Receipt | None = None,
    ) -> Answer:
        """``snooze_as``, its refusal returned beside the row it was decided on (as
        ``AckService.try_answer``): a provider's Snooze button tells a presser whose
        obligation ended how it ended. ``metadata`` (the provider's user name...) is
        kept on the event and the audit record. The callback's ``receipt`` is written in the
        same transaction: kept with the snooze or the refusal, rolled back with a
        snooze that failed (the provider's retry is then served)."""
        seen: Notification | None = None
        async with self._store.write() as tx:
            if receipt is not None and not await tx.receipts.record(
                receipt.digest, receipt.provider, self._clock()
            ):
                return Answer(None, replayed=True)
            seen = await tx.notifications.get_locked(notification_id)
            if seen is None:
                return Answer(None, refusal=NotFound(metadata={"notification_id": notification_id}))
            try:
                await self._snooze(tx, seen, actor, via, duration, metadata or {})
            except (AckNotPending, AckDeadlinePassed, AckConflict) as refusal:
                # Refused before anything was written: the receipt is kept (the
                # callback was answered; a replay of it is refused like any other).
                return Answer(seen, refusal=refusal)
            snoozed = await tx.notifications.get(notification_id)
        assert snoozed is not None
        return Answer(snoozed)

    async def _snooze(
        self,
        tx: WriteTransaction,
        row: Notification,
        actor: str,
        via: str,
        duration: timedelta,
        metadata: Mapping[str, str],
    ) -> None:
        now = self._clock()
        decided = snooze.decide_snooze(
            ack_target(row),
            snoozed_until=row.snoozed_until,
            paused_seconds=row.snoozed_seconds,
            actor=actor,
            duration=duration,
            now=now,
        )
        if not await tx.acks.snooze(row.id, decided, now):  # the row is locked: a bug
            raise MoveLost(f"snooze of {row.id}: the ack was no longer owed")
        await tx.jobs.insert_many(decided.timers(row.id), now)
        payload: dict[str, Any] = {
            "actor": actor,
            "via": via,
            "duration_seconds": round(duration.total_seconds()),
            "until": decided.until.isoformat(),
            "deadline": decided.deadline.isoformat(),
            **recipient_of(actor),
            **({"metadata": dict(metadata)} if metadata else {}),
        }
        await tx.audit.record_ack(
            row.id,
            old_status=row.ack_status,
            new_status=AckStatus.SNOOZED,
            actor=actor,
            metadata={**metadata, "until": payload["until"]},
            now=now,
            via=via,
        )
        await tx.events.append([_event(row, EventKind.SNOOZED, payload)], now)

    async def fire_ends(self, tx: WriteTransaction, jobs: Sequence[Job], now: datetime) -> int:
        """The due ``snooze_end`` jobs of a timers round (``workers.timers``, which
        claimed them in ``tx`` and completes them): lock their notifications and end
        each snooze still running past its end (``domain.snooze.resumes``; a stale job
        does nothing). How many snoozes ended."""
        locked = await tx.acks.locked({j.notification_id for j in jobs if j.notification_id})
        ended = {
            row.id: row
            for job in jobs
            if (row := locked.get(job.notification_id or "")) is not None
            and snooze.resumes(row.ack_status, row.snoozed_until, now)
        }
        for row in ended.values():
            await self._resume(tx, row, now)
        return len(ended)

    async def _resume(self, tx: WriteTransaction, row: Notification, now: datetime) -> None:
        if not await tx.acks.resume(row.id, now):  # locked and checked: a bug
            raise MoveLost(f"snooze end of {row.id}: no longer snoozed")
        # The person is asked again at once (the reminder is this job's step); the
        # policy's own steps resume after it, shifted by the pauses.
        number = row.snoozes_ended + 1  # what ``resume`` counted
        due = snooze.reminder_due(row, now)
        await tx.jobs.insert_many([follow_up_jobs.snooze_reminder(row.id, number, due)], now)
        await tx.audit.record_ack(
            row.id,
            old_status=AckStatus.SNOOZED,
            new_status=AckStatus.PENDING,
            actor=END_ACTOR,
            metadata=None,
            now=now,
            via=VIA_EXPIRY,
        )
        payload = {
            "deadline": row.deadline.isoformat() if row.deadline else None,
            "snooze": number,  # its reminder's REMINDER_SENT names the same number
        }
        await tx.events.append([_event(row, EventKind.SNOOZE_ENDED, payload)], now)


def _event(row: Notification, kind: EventKind, payload: dict[str, Any]) -> NewEvent:
    return NewEvent(row.id, row.principal, row.notification_type, kind, payload)
