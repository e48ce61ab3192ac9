"""Accepting obligations: SendNotification and Simulate (seed 000 §1.1, SPEC §2).

Order of checks: validation, policy resolution (POLICY_OVERRIDE), then one write
transaction that decides idempotency and dedup and appends the ACCEPTED event.
A refused request writes nothing: every refusal happens before its writes, and a
failed transaction rolls back.

Concurrent requests share that transaction (group commit, ``uns_server.batching``):
each is decided in arrival order, one refusal does not affect the others, and a
group that loses a race (a unique index, a deadlock) is retried request by request.

The decision itself is ``domain.admission.decide_admission`` (idempotent replay,
IDEMPOTENCY_CONFLICT, a new leader, a follower of a pending owner, DEDUPLICATED at
once). Intake only loads what it needs, under the dedup window's lock, asks, and
stores the answer.

On PostgreSQL the common case (one caller's requests, no dedup key, each type's ACTIVE
revision read before) is decided without reads and written by one statement that
checks them (``Intake._speculated``): one round trip, no BEGIN or COMMIT. If a key is
held or a policy moved, that statement writes nothing and the group goes the long way
above. A group several callers share goes the long way at once: its longer commit
gathers more callers into the next group, which is cheaper under load.

Size: the single send and the batch (``send_many``) share one intake path through the
group commit, and the one-statement path shares it too; splitting them would copy it.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from opentelemetry import trace

from uns_server.batching import GroupCommit
from uns_server.domain import digests, schedule
from uns_server.domain.admission import (
    Admit,
    Conflict,
    Existing,
    Fresh,
    IdempotentRepeat,
    SendOutcome,
    WindowOwner,
    decide_admission,
)
from uns_server.domain.enums import EventKind, Status
from uns_server.domain.errors import IdempotencyConflict, UnsError
from uns_server.domain.maintenance import MaintenanceWindow, held_payload
from uns_server.domain.planned_people import PlannedAsk
from uns_server.domain.policy import (
    EffectivePolicy,
    PolicyRevision,
    ServerDefaults,
    check_sender,
    resolve,
)
from uns_server.domain.records import Notification
from uns_server.domain.requests import SendRequest
from uns_server.domain.validation import validate_send
from uns_server.observability import tracing
from uns_server.observability.metrics import Metrics
from uns_server.observability.phases import ACCEPT_COMMIT, phased
from uns_server.services import message_preview, targeting
from uns_server.services.intake_record import new_notification
from uns_server.services.maintenance import OpenWindows
from uns_server.services.message_preview import Previews
from uns_server.store.port import (
    TOPIC_WORK,
    FenceMoved,
    NewEvent,
    ReadTransaction,
    Store,
    WriteTransaction,
)

log = logging.getLogger("uns.intake")
Clock = Callable[[], datetime]

# Concurrent first sends of one key (or one dedup window) race on a unique index;
# the loser retries and then sees the winner's committed row.
_INSERT_RACE_RETRIES = 5
# Requests committed together at most (see uns_server.batching).
MAX_BATCH_DEFAULT = 128
# Notification types whose ACTIVE revision intake remembers (``Intake._remember``).
_ACTIVE_REMEMBERED_MAX = 1024


@dataclass(frozen=True, slots=True)
class SendResult:
    notification_id: str
    status: Status
    outcome: SendOutcome
    effective: EffectivePolicy
    dedup_owner_id: str | None

    @property
    def idempotent_replay(self) -> bool:
        return self.outcome == SendOutcome.IDEMPOTENT_REPLAY


@dataclass(frozen=True)
class Decision:
    """What Simulate reports: Send's decision, from the same reads."""

    outcome: SendOutcome
    effective: EffectivePolicy
    existing: Existing | None = None  # the idempotency match
    owner: WindowOwner | None = None  # the leader this request would follow
    # For NEW: the plan over time (``domain.planned_people``, over ``schedule.plan``).
    plan: tuple[schedule.Step, ...] = ()
    accepted_at: datetime | None = None
    # Who each planned step asks, by (kind, number) (``domain.planned_people``).
    asked: Mapping[tuple[schedule.StepKind, int], PlannedAsk] = field(default_factory=dict)
    # What each planned step's messages say, templates applied (``message_preview``).
    messages: Previews = field(default_factory=dict)
    # The maintenance window open when the first delivery falls due, which would hold it.
    held_by: MaintenanceWindow | None = None


class LeaseHandover(Protocol):
    """The local dispatcher (``workers.dispatch.Dispatcher``), to which a group commit
    hands the due leaders it inserts already leased: they skip the claim transaction
    and the wake-up before it."""

    def can_deliver(self, new: Notification) -> bool: ...

    def reserve(self, wanted: int) -> int: ...

    def lease_new(
        self, new: Notification, now: datetime
    ) -> tuple[Notification, Any, list[NewEvent]]:
        """(``new`` leased, to insert instead; its claim; the events of the claim)."""
        ...

    def hand_over(self, reserved: int, claims: Sequence[Any]) -> None: ...


@dataclass(frozen=True)
class _Pending:
    """One validated SendNotification waiting for its group commit."""

    principal: str
    req: SendRequest
    key: str
    fingerprint: str
    trace_context: dict[str, str]
    caller: int  # one per send() or send_many() call: who shares the group


class Intake:
    def __init__(
        self,
        store: Store,
        defaults: ServerDefaults,
        clock: Clock,
        metrics: Metrics | None = None,
        *,
        max_batch: int = MAX_BATCH_DEFAULT,
        handoff: LeaseHandover | None = None,
        channel_types: Mapping[str, str] | None = None,
        windows: OpenWindows | None = None,
    ) -> None:
        self._store = store
        self._windows = windows  # maintenance windows: what they hold waits for their end
        self._channel_types = dict(channel_types or {})  # Simulate's message preview
        self._handoff = handoff
        self._defaults = defaults
        self._clock = clock
        self._metrics = metrics or Metrics.noop()
        self._group: GroupCommit[_Pending, SendResult] = GroupCommit(
            self._commit, max_batch=max_batch
        )
        # Each type's ACTIVE revision as last read (``_remember``, ``_speculated``).
        self._active: dict[str, PolicyRevision | None] = {}
        self._callers = itertools.count()

    @property
    def queued(self) -> int:
        """Requests waiting behind the group commit in flight."""
        return self._group.queued

    async def simulate(self, principal: str, req: SendRequest) -> Decision:
        """Exactly Send's decision, from a read transaction: nothing is written."""
        now = self._clock()
        validate_send(req, now)
        key, fingerprint = _keys(principal, req)
        async with self._store.read() as tx:
            read: Existing | Fresh | None = await _holder(tx, key)
            if read is None:
                active = await tx.policies.active(req.notification_type)
                read = await self._fresh(tx, principal, req, active, now)
        admission = decide_admission(fingerprint, read, new_id=str(uuid.uuid4()), now=now)
        if not isinstance(admission, Admit):
            existing = admission.existing
            return Decision(admission.outcome, existing.effective, existing=existing)
        decision = Decision(admission.outcome, admission.effective, owner=admission.owner)
        if admission.outcome != SendOutcome.NEW:
            return decision
        # The same rules as the workers: intake's first attempt, the follow-up worker.
        effective = decision.effective
        planned = await targeting.planned(
            self._store,
            now,
            req.schedule_time,
            effective.spec.timing,
            req.intent,
            effective.urgency,
        )
        messages = await message_preview.previews(
            self._store,
            req,
            decision.effective,
            now,
            planned.steps,
            planned.asked,
            self._channel_types,
        )
        due = schedule.first_attempt_at(
            now, req.schedule_time, decision.effective.quiet_hours, req.intent
        )
        intent = req.intent.value if req.intent else None
        held_by = (
            self._windows.holding(req.notification_type, intent, due) if self._windows else None
        )
        return replace(
            decision,
            plan=planned.steps,
            accepted_at=now,
            asked=planned.asked,
            messages=messages,
            held_by=held_by,
        )

    async def send(self, principal: str, req: SendRequest) -> SendResult:
        validate_send(req, self._clock())
        key, fingerprint = _keys(principal, req)
        # Captured here: the commit runs in the group's task, outside this RPC's span.
        context = tracing.current_trace_context()
        pending = _Pending(principal, req, key, fingerprint, context, next(self._callers))
        result, batch_size = await self._group.submit(pending)
        trace.get_current_span().set_attribute("uns.intake.batch_size", batch_size)
        self._observe(result)
        return result

    async def send_many(
        self, principal: str, reqs: Sequence[SendRequest | UnsError]
    ) -> list[SendResult | Exception]:
        """``send`` for each request, in order, through the same group commit: the
        valid ones queue together (as few transactions as ``max_batch`` allows), each
        decided exactly as a single send, an earlier item of the batch counting like
        a committed one (idempotency, dedup). An item given as an ``UnsError``, or
        that fails validation or its own decision, answers that error alone."""
        now = self._clock()
        results: list[SendResult | Exception | None] = []
        pending: list[_Pending] = []
        context, caller = tracing.current_trace_context(), next(self._callers)
        for req in reqs:
            if isinstance(req, UnsError):
                results.append(req)
                continue
            try:
                validate_send(req, now)
            except UnsError as exc:
                results.append(exc)
                continue
            key, fingerprint = _keys(principal, req)
            pending.append(_Pending(principal, req, key, fingerprint, context, caller))
            results.append(None)
        committed = iter(await self._group.submit_many(pending))
        answers: list[SendResult | Exception] = []
        for result in results:
            answer = next(committed) if result is None else result
            if isinstance(answer, SendResult):
                self._count(answer)
            answers.append(answer)
        trace.get_current_span().set_attribute("uns.intake.batch_requests", len(reqs))
        return answers

    async def send_in(
        self, tx: WriteTransaction, principal: str, req: SendRequest, now: datetime
    ) -> SendResult:
        """``send`` inside the caller's transaction, the long way (no group, no lease
        handed to the dispatcher: it is woken after the commit), so the send commits
        with the caller's other writes or not at all (a heartbeat's page with its
        deadline job's settle). Refusals are raised before anything is written."""
        validate_send(req, now)
        key, fingerprint = _keys(principal, req)
        item = _Pending(principal, req, key, fingerprint, {}, next(self._callers))
        holder = await _holder(tx, key)
        existing = {} if holder is None else {key: holder}
        active = await tx.policies.active_many({req.notification_type})
        group = _Group()
        result = await self._admit(tx, group, item, active, existing, now)
        if group.rows:
            await tx.notifications.insert_before_events(group.rows)
        if group.work or group.due:
            tx.signal(TOPIC_WORK)
        await tx.events.append(group.events, now)
        self._count(result)
        return result

    def _count(self, result: SendResult) -> None:
        if result.outcome == SendOutcome.IDEMPOTENT_REPLAY:
            self._metrics.idempotent_replay()
        else:
            self._metrics.accepted(result.outcome.lower())

    def _observe(self, result: SendResult) -> None:
        """Count and log the committed outcome; name it on the RPC's span."""
        outcome = result.outcome
        self._count(result)
        trace.get_current_span().set_attribute("uns.notification_id", result.notification_id)
        # DEBUG: one line per request would duplicate the ACCEPTED event at volume.
        log.debug(
            "notification accepted",
            extra={
                "notification_id": result.notification_id,
                "outcome": outcome.value,
                "status": result.status.value,
                "dedup_owner_id": result.dedup_owner_id,
            },
        )

    @phased(ACCEPT_COMMIT)
    async def _commit(self, items: Sequence[_Pending]) -> list[SendResult | Exception]:
        """Commit a group; if it lost a race, commit its items one by one.

        Races (two first sends of one key, two leaders of one dedup window, a deadlock
        between two groups locking in different orders) roll the whole group back;
        alone, each item retries until it sees the winner's committed row.
        """
        if len(items) > 1:
            try:
                return await self._commit_group(items)
            except Exception as exc:
                if not self._store.is_lost_race(exc):
                    raise
        results: list[SendResult | Exception] = []
        for item in items:
            try:
                results.append(await self._commit_alone(item))
            except Exception as exc:
                if len(items) == 1:
                    raise
                results.append(exc)
        return results

    async def _commit_alone(self, item: _Pending) -> SendResult | Exception:
        for attempt in range(_INSERT_RACE_RETRIES):
            try:
                return (await self._commit_group([item]))[0]
            except Exception as exc:
                if not self._store.is_lost_race(exc) or attempt == _INSERT_RACE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def _commit_group(self, items: Sequence[_Pending]) -> list[SendResult | Exception]:
        """The group in one statement if its reads can be taken as known
        (``_speculated``), else (or if that statement finds them wrong) the long way."""
        known = self._speculated(items)
        if known is not None:
            try:
                return await self._write_group(items, known)
            except (FenceMoved, _Unconfirmed):
                pass  # a key is held or a policy moved: read them, decide again
        return await self._write_group(items, None)

    def _speculated(self, items: Sequence[_Pending]) -> dict[str, PolicyRevision | None] | None:
        """PostgreSQL's common case: no item has a dedup key (no window to lock and
        read) and each type's ACTIVE revision was read before (``_active``). The
        group is then decided as if no key were held and those revisions were active,
        and written by one statement that checks both (``insert_new_before_events``).
        None: take the long way.

        Only for a group of one caller's requests: the statement saves round trips
        for a caller who is alone, but when several callers share a group its quick
        commit leaves fewer of them to join the next one, and under load the smaller
        groups cost more CPU per call than the round trips save (docs/PERFORMANCE.md,
        "calls per intake transaction")."""
        if not self._store.writes_in_one_statement:
            return None
        if len({item.caller for item in items}) > 1:
            return None
        known: dict[str, PolicyRevision | None] = {}
        for item in items:
            kind = item.req.notification_type
            if item.req.dedup_key or kind not in self._active:
                return None
            known[kind] = self._active[kind]
        return known

    async def _write_group(
        self, items: Sequence[_Pending], known: Mapping[str, PolicyRevision | None] | None
    ) -> list[SendResult | Exception]:
        """One write transaction for every item: two reads for the whole group (keys,
        ACTIVE policies), one multi-row insert of the new notifications, one append
        of their events. Dedup items lock and write their window rows one by one.
        New leaders go in leased to the local dispatcher as far as it has free slots
        (``LeaseHandover``); it gets their claims once the transaction has committed.

        With ``known`` policies (``_speculated``) there are no reads: one statement
        (``Store.one_statement``) writes the group if no key is held and the
        policies still hold, or nothing (``FenceMoved``). A refusal other than an
        in-group conflict is not confirmed by that statement: ``_Unconfirmed``."""
        now = self._clock()
        results: list[SendResult | Exception] = []
        reserved, claims = 0, []
        write = self._store.write() if known is None else self._store.one_statement()
        try:
            async with write as tx:
                if known is None:
                    holders = await tx.notifications.by_keys({i.key for i in items})
                    existing = {key: _existing(holder) for key, holder in holders.items()}
                    types = {i.req.notification_type for i in items}
                    active = await tx.policies.active_many(types)
                    self._remember(types, active)
                else:
                    existing = {}
                    active = {t: rev for t, rev in known.items() if rev is not None}
                group = _Group()
                for item in items:
                    try:
                        results.append(
                            await self._admit(tx, group, item, active, existing, now, known)
                        )
                    except UnsError as exc:  # this item's refusal; it wrote nothing
                        if known is not None and not isinstance(exc, IdempotencyConflict):
                            raise _Unconfirmed() from exc
                        results.append(exc)
                if known is not None and not group.rows:
                    raise _Unconfirmed()  # nothing to write, so nothing would check
                if self._handoff is not None and group.due:
                    new = group.rows
                    mine = [i for i in group.due if self._handoff.can_deliver(new[i])]
                    reserved = self._handoff.reserve(len(mine))
                    for i in mine[:reserved]:
                        new[i], claim, claim_events = self._handoff.lease_new(new[i], now)
                        claims.append(claim)
                        group.events += claim_events
                if known is None:
                    await tx.notifications.insert_before_events(group.rows)
                else:
                    tx.notifications.insert_new_before_events(group.rows, known)
                if group.work or len(group.due) > reserved:
                    tx.signal(TOPIC_WORK)
                await tx.events.append(group.events, now)
        except BaseException:
            claims = []
            raise
        finally:
            if reserved:
                assert self._handoff is not None
                self._handoff.hand_over(reserved, claims)
        self._metrics.intake_group(len(items))
        return results

    def _remember(self, types: Collection[str], active: Mapping[str, PolicyRevision]) -> None:
        """What the long way read of each type's ACTIVE revision (None: none), for
        ``_speculated``; a statement that finds one changed sends the group back here."""
        if len(self._active) + len(types) > _ACTIVE_REMEMBERED_MAX:
            self._active.clear()
        for kind in types:
            self._active[kind] = active.get(kind)

    async def _admit(
        self,
        tx: WriteTransaction,
        group: _Group,
        item: _Pending,
        active: Mapping[str, PolicyRevision],
        existing: Mapping[str, Existing],
        now: datetime,
        known: object = None,
    ) -> SendResult:
        """Load what this request could collide with, ask the domain, store its answer.
        ``known``: the group goes as one statement (``_speculated``), which may read
        nothing: a maintenance window's hold sends it the long way."""
        principal, req = item.principal, item.req
        # The key held by a committed notification, or by an earlier item of this group.
        read: Existing | Fresh | None = existing.get(item.key) or group.admitted.get(item.key)
        if read is None:
            read = await self._fresh(tx, principal, req, active.get(req.notification_type), now)
        admission = decide_admission(item.fingerprint, read, new_id=str(uuid.uuid4()), now=now)
        if isinstance(admission, IdempotentRepeat):
            return _replayed(admission.existing)
        if isinstance(admission, Conflict):
            raise admission.error()
        if admission.window is not None:
            await tx.notifications.take_dedup_window(admission.window)
        effective, status = admission.effective, admission.status
        first_attempt = schedule.first_attempt_at(
            now, req.schedule_time, effective.quiet_hours, req.intent
        )
        hold = None
        if self._windows is not None and status == Status.PENDING and admission.owner is None:
            intent = req.intent.value if req.intent else None
            if first_attempt <= now and (
                hold := self._windows.holding(req.notification_type, intent, now)
            ):
                if known is not None:
                    raise _Unconfirmed()
                hold = await self._windows.verified(tx, hold, req.notification_type, intent, now)
            first_attempt = first_attempt if hold is None else hold.end_time
        new = new_notification(
            item.principal,
            item.req,
            item.key,
            item.fingerprint,
            item.trace_context,
            admission,
            now=now,
            first_attempt=first_attempt,
            hold=hold,
        )
        if admission.dedup_key is not None:
            # Written now: a later item of this group may find this one as its owner.
            await tx.notifications.insert([new])
            group.work = group.work or (status == Status.PENDING and admission.owner is None)
        else:
            if status == Status.PENDING and first_attempt <= now:
                group.due.append(len(group.rows))
            elif status == Status.PENDING:  # scheduled: never leased early; wake the
                group.work = True  # dispatchers so they sleep until its time
            group.rows.append(new)
        nid, kind = admission.notification_id, req.notification_type
        group.events += [
            NewEvent(nid, principal, kind, e.kind, e.payload) for e in admission.events
        ]
        if hold is not None:  # due at the window's end, visibly
            group.events.append(NewEvent(nid, principal, kind, EventKind.HELD, held_payload(hold)))
        owner_id = admission.owner_id
        group.admitted[item.key] = Existing(nid, item.fingerprint, status, effective, owner_id)
        return SendResult(nid, status, admission.outcome, effective, owner_id)

    async def _fresh(
        self,
        tx: ReadTransaction,
        principal: str,
        req: SendRequest,
        active: PolicyRevision | None,
        now: datetime,
    ) -> Fresh:
        """For a key not seen before: the policy, then the dedup window (locked) and
        its owner. A send scheduled for later coalesces only with sends scheduled for
        the same time (``digests.dedup_digest``). A principal the policy does not
        allow is refused here, after idempotency (an accepted send still replays)."""
        check_sender(principal, req.notification_type, active)
        effective = resolve(req, active, self._defaults)
        if not req.dedup_key:
            return Fresh(effective)
        scheduled = req.schedule_time if req.schedule_time and req.schedule_time > now else None
        dedup_key = digests.dedup_digest(
            principal, req.source, req.dedup_key, effective.effective_hash, scheduled
        )
        window = await tx.notifications.locked_dedup_window(dedup_key)
        owner = (
            await tx.notifications.window_owner(window.owner_id)
            if window is not None and window.owner_id
            else None
        )
        return Fresh(effective, dedup_key, window, owner)


class _Unconfirmed(Exception):
    """The one-statement write could not confirm a group's answers (a refusal decided
    under a remembered policy, or nothing to write): decide it the long way."""


@dataclass
class _Group:
    """What one group commit has admitted so far."""

    rows: list[Notification] = field(default_factory=list)  # inserted together at the end
    events: list[NewEvent] = field(default_factory=list)
    admitted: dict[str, Existing] = field(default_factory=dict)  # by idempotency key
    due: list[int] = field(default_factory=list)  # new leaders: their indices in ``rows``
    work: bool = False  # a dedup leader is due (inserted already): wake the dispatchers


def _existing(holder: Notification) -> Existing:
    """What a replay of the key's holder answers (its policy as it was accepted)."""
    effective = holder.notification.effective
    return Existing(holder.id, holder.fingerprint, holder.status, effective, holder.dedup_owner_id)


async def _holder(tx: ReadTransaction, key: str) -> Existing | None:
    holder = await tx.notifications.by_key(key)
    return None if holder is None else _existing(holder)


def _keys(principal: str, req: SendRequest) -> tuple[str, str]:
    """(idempotency digest, payload fingerprint). Without a key every call is new."""
    idem_key = req.idempotency_key or f"auto:{uuid.uuid4()}"
    return digests.idempotency_digest(principal, req.source, idem_key), digests.fingerprint(req)


def _replayed(existing: Existing) -> SendResult:
    return SendResult(
        existing.id,
        existing.status,
        SendOutcome.IDEMPOTENT_REPLAY,
        existing.effective,
        existing.dedup_owner_id,
    )
