"""The acknowledgement lifecycle (seed 000 §1.2): load, ask ``domain.acks.decide_ack``,
settle.

    (none) --delivered with require_ack--> PENDING
    (none) --answered while the delivery is in flight--> ACKED | DISMISSED
    PENDING --Acknowledge before deadline--> ACKED | DISMISSED      (responder)
    PENDING --deadline passed, timers worker--> TIMED_OUT           (uns-timeout-worker)

    PENDING --WithdrawNotification--> WITHDRAWN                      (producer, operator)

Same actor + same outcome again returns the original settlement; an answer to a
withdrawn ack is ACK_NOT_PENDING (metadata ``ack_state`` WITHDRAWN, the withdrawing
actor unnamed); anything else on a settled ack is ACK_CONFLICT; after the deadline
ACK_DEADLINE_PASSED, even before the sweep has run (late human acks are refused, never
raced against the worker).

Tenancy (SPEC §3) comes first: a notification outside the caller's tenants answers
NOT_FOUND exactly like an unknown id, before anything about its state is said. An
ACK_CONFLICT names the settling actor only when the caller may see it
(``Principal.may_name``: itself, a principal of its tenants, anyone for an operator);
otherwise it says "another actor".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uns_server.domain import ack_deadlines
from uns_server.domain.acks import AckTarget, decide_ack, sent_while_held
from uns_server.domain.enums import AckStatus, EventKind, Status
from uns_server.domain.errors import (
    AckConflict,
    AckDeadlinePassed,
    AckNotPending,
    NotFound,
    UnsError,
)
from uns_server.domain.records import Job, Notification
from uns_server.domain.validation import validate_ack_metadata, validate_notification_id
from uns_server.observability.metrics import Metrics
from uns_server.services.auth import Principal
from uns_server.store.port import NewEvent, Store, WriteTransaction

TIMEOUT_ACTOR = "uns-timeout-worker"
# Where an answer came from (``via`` on the audit record and the event payload).
VIA_GRPC = "grpc"
VIA_EXPIRY = "expiry"
# ``hook(tx, row, outcome, actor, via, now)``, run inside every settling transaction
# (``AckService.settle_hooks``): queues follow-up work such as message updates (an outbox).
SettleHook = Callable[
    [WriteTransaction, Notification, AckStatus, str, str, datetime], Awaitable[None]
]


def decide(
    row: Notification,
    outcome: AckStatus,
    actor: str,
    now: datetime,
    *,
    may_name: Callable[[str | None], bool] = lambda _actor: True,
) -> bool:
    """The acknowledgement decision of ``row`` (``domain.acks.decide_ack``): True for a
    same-actor, same-outcome repeat, False when the pending ack may be settled now;
    raises the refusal otherwise."""
    return decide_ack(ack_target(row), outcome, actor, now, may_name=may_name)


def ack_target(row: Notification) -> AckTarget:
    return AckTarget(
        id=row.id,
        status=row.status,
        require_ack=row.require_ack,
        ack_status=row.ack_status,
        deadline=row.deadline,
        actor=row.actor,
        in_flight=(row.status == Status.PENDING and row.lease_token is not None)
        or sent_while_held(row),
    )


RECIPIENT_ACTOR = "recipient:"


def recipient_of(actor: str) -> dict[str, str]:
    """``{"recipient_id": ...}`` when a targeted person answered (their link, or a
    Slack button pressed by their Slack user): SPEC §6."""
    if actor.startswith(RECIPIENT_ACTOR):
        return {"recipient_id": actor.removeprefix(RECIPIENT_ACTOR)}
    return {}


@dataclass(frozen=True)
class Receipt:
    """A provider callback's receipt (replay protection, ``uns_callback_receipts``):
    written in the transaction that decides the answer, so a callback whose settle
    fails leaves no receipt and the provider's retry of it is answered, while of
    concurrent copies only the first goes on (the others wait on its key)."""

    digest: str
    provider: str


@dataclass(frozen=True)
class Answer:
    """What an outside answer came to, from the one read that decided it: ``row`` as
    settled, or as it stood when ``refusal`` refused the answer (None: no such
    notification); ``repeat`` for a same-actor, same-outcome repeat; ``replayed`` when
    its ``Receipt`` was already there (nothing read, nothing decided)."""

    row: Notification | None
    repeat: bool = False
    refusal: UnsError | None = None
    replayed: bool = False


class AckService:
    def __init__(
        self, store: Store, clock: Callable[[], datetime], metrics: Metrics | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics or Metrics.noop()
        self.settle_hooks: list[SettleHook] = []

    async def acknowledge(
        self,
        principal: Principal,
        notification_id: str,
        *,
        dismiss: bool,
        metadata: Mapping[str, Any],
    ) -> tuple[Notification, bool]:
        """Returns the settled row and whether this call was an idempotent repeat."""
        nid = validate_notification_id(notification_id)
        validate_ack_metadata(metadata)
        outcome = AckStatus.DISMISSED if dismiss else AckStatus.ACKED
        now = self._clock()
        async with self._store.write() as tx:
            row = await tx.notifications.get_locked(nid)
            if row is None or not principal.may_read(row.principal):
                raise NotFound(metadata={"notification_id": nid})
            if decide(row, outcome, principal.name, now, may_name=principal.may_name):
                return row, True
            await settle(
                tx,
                row,
                outcome,
                principal.name,
                dict(metadata),
                now,
                via=VIA_GRPC,
                hooks=self.settle_hooks,
            )
            settled = await tx.notifications.get(nid)
        assert settled is not None
        self._metrics.acknowledged(outcome.value)
        return settled, False

    async def answer(
        self,
        notification_id: str,
        *,
        actor: str,
        via: str,
        dismiss: bool,
        metadata: Mapping[str, Any],
    ) -> tuple[Notification, bool]:
        """An answer from outside gRPC (a signed link, a provider callback) by ``actor``,
        the recipient identity the link or callback carries: the same decision as
        ``acknowledge``, recorded with the channel it came ``via``. The caller has
        already proven the right to answer (a verified token or provider signature)."""
        result = await self.try_answer(
            notification_id, actor=actor, via=via, dismiss=dismiss, metadata=metadata
        )
        if result.refusal is not None:
            raise result.refusal
        assert result.row is not None
        return result.row, result.repeat

    async def try_answer(
        self,
        notification_id: str,
        *,
        actor: str,
        via: str,
        dismiss: bool,
        metadata: Mapping[str, Any],
        receipt: Receipt | None = None,
    ) -> Answer:
        """``answer``, its refusal returned beside the row it was decided on rather than
        raised: a caller that tells the refused person why the obligation ended reads
        that row, not the notification again. A provider callback's ``receipt`` is
        written in the same transaction: kept with the settlement or the refusal,
        rolled back with a settle that failed (the provider's retry is then served)."""
        outcome = AckStatus.DISMISSED if dismiss else AckStatus.ACKED
        now = self._clock()
        seen: Notification | None = None
        refusals = (NotFound, AckNotPending, AckDeadlinePassed, AckConflict)
        try:
            async with self._store.write() as tx:
                if receipt is not None and not await tx.receipts.record(
                    receipt.digest, receipt.provider, now
                ):
                    return Answer(None, replayed=True)
                seen = await tx.notifications.get_locked(notification_id)
                try:
                    if seen is None:
                        raise NotFound(metadata={"notification_id": notification_id})
                    if decide(seen, outcome, actor, now):
                        return Answer(seen, repeat=True)
                except refusals as refusal:
                    # Nothing written but the receipt, which is kept: the callback was
                    # answered (a replay of it is refused like any other).
                    return Answer(seen, refusal=refusal)
                await settle(
                    tx, seen, outcome, actor, dict(metadata), now, via=via, hooks=self.settle_hooks
                )
                settled = await tx.notifications.get(notification_id)
        except refusals as refusal:
            return Answer(seen, refusal=refusal)  # raised by settle: the transaction rolls back
        assert settled is not None
        self._metrics.acknowledged(outcome.value)
        return Answer(settled)

    async def fire_deadlines(self, tx: WriteTransaction, jobs: Sequence[Job], now: datetime) -> int:
        """The due ``ack_deadline`` jobs of a timers round (``workers.timers``, which
        claimed them in ``tx`` and completes them): lock their notifications (in id
        order, waiting for an answer being committed) and time out each ack still
        PENDING past its deadline (``domain.ack_deadlines.times_out``; a stale timer
        does nothing; two timers of one ack time it out once). How many timed out."""
        locked = await tx.acks.locked({j.notification_id for j in jobs if j.notification_id})
        timed_out: dict[str, Notification] = {}
        for job in jobs:
            row = locked.get(job.notification_id or "")
            if row is not None and ack_deadlines.times_out(row, now):
                timed_out[row.id] = row
        for row in timed_out.values():
            await self._time_out(tx, row, now)
        self._metrics.ack_timeouts(len(timed_out))
        return len(timed_out)

    async def carry_deadlines(self, tx: WriteTransaction, now: datetime, limit: int) -> int:
        """The carry sweep, after the round's jobs: up to ``limit`` PENDING acks past
        their deadline that no job timed out, as a replica of the previous release
        settles deliveries without one (``AckService.due_deadlines``; removed with that
        release by a later contract step). How many timed out."""
        carried = await tx.acks.due_deadlines(now, limit)
        for row in carried:
            await self._time_out(tx, row, now)
        self._metrics.ack_timeouts(len(carried))
        return len(carried)

    async def _time_out(self, tx: WriteTransaction, row: Notification, now: datetime) -> None:
        await settle(
            tx,
            row,
            AckStatus.TIMED_OUT,
            TIMEOUT_ACTOR,
            {"escalation_required": True},
            now,
            via=VIA_EXPIRY,
            hooks=self.settle_hooks,
        )


async def settle(
    tx: WriteTransaction,
    row: Notification,
    outcome: AckStatus,
    actor: str,
    metadata: dict[str, Any],
    now: datetime,
    *,
    via: str = VIA_GRPC,
    hooks: Sequence[SettleHook] = (),
) -> None:
    ok = await tx.acks.settle_pending(
        row.id,
        status=outcome,
        actor=actor,
        metadata=metadata,
        now=now,
        sent_while_held=sent_while_held(row),
    )
    if not ok:  # the row is locked; this would be a bug in the caller
        raise AckConflict(metadata={"notification_id": row.id})
    await tx.audit.record_ack(
        row.id,
        old_status=row.ack_status,
        new_status=outcome,
        actor=actor,
        metadata=metadata,
        now=now,
        via=via,
    )
    for hook in hooks:
        await hook(tx, row, outcome, actor, via, now)
    await tx.events.append(
        [
            NewEvent(
                row.id,
                row.principal,
                row.notification_type,
                EventKind(outcome.value),
                {"actor": actor, "metadata": metadata, "via": via, **recipient_of(actor)},
            )
        ],
        now,
    )
