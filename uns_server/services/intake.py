"""Accepting obligations: SendNotification and Simulate (seed 000 §1.1, SPEC §2).

Order of checks: validation, policy resolution (POLICY_OVERRIDE), then one write
transaction that decides idempotency and dedup and appends the ACCEPTED event.
A refused request writes nothing: every refusal happens before its writes, and a
failed transaction rolls back.

Concurrent requests share that transaction (group commit, ``uns_server.batching``):
each is decided in arrival order, one refusal does not affect the others, and a
group that loses a race (a unique index, a deadlock) is retried request by request.

Dedup coalescing per window row (``uns_dedup``, locked for the transaction):
- no row, or its owner is gone / FAILED, or the window after a delivery expired
  -> this notification leads a new generation;
- owner PENDING -> follower (PENDING, ``dedup_owner_id`` set), whatever the
  window's ``until``: pending ownership survives window expiry;
- owner DELIVERED and ``now < until`` -> DEDUPLICATED at once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from opentelemetry import trace
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.batching import GroupCommit
from uns_server.domain import digests, lifecycle, schedule
from uns_server.domain.enums import EventKind, Status
from uns_server.domain.errors import IdempotencyConflict, UnsError
from uns_server.domain.policy import EffectivePolicy, PolicyRevision, ServerDefaults, resolve
from uns_server.domain.requests import SendRequest
from uns_server.domain.validation import validate_send
from uns_server.observability import tracing
from uns_server.observability.metrics import Metrics
from uns_server.observability.phases import ACCEPT_COMMIT, phased
from uns_server.store import events, notifications, policies
from uns_server.store.db import TOPIC_WORK, Database
from uns_server.store.events import NewEvent
from uns_server.store.pg import Row

log = logging.getLogger("uns.intake")
Clock = Callable[[], datetime]

# Concurrent first sends of one key (or one dedup window) race on a unique index;
# the loser retries and then sees the winner's committed row.
_INSERT_RACE_RETRIES = 5
# Requests committed together at most (see uns_server.batching).
MAX_BATCH_DEFAULT = 128


@dataclass(frozen=True)
class SendResult:
    notification_id: str
    status: Status
    idempotent_replay: bool
    effective: EffectivePolicy
    dedup_owner_id: str | None


class Outcome(StrEnum):
    """What SendNotification does with a request (also what Simulate reports)."""

    NEW = "NEW"
    IDEMPOTENT_REPLAY = "IDEMPOTENT_REPLAY"
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"
    COALESCED = "COALESCED"
    DEDUPLICATED = "DEDUPLICATED"


@dataclass(frozen=True)
class Decision:
    """The one decision both Send and Simulate make, from the same reads."""

    outcome: Outcome
    effective: EffectivePolicy
    existing: Row | None = None  # the idempotency match
    dedup_key: str | None = None
    window: Row | None = None  # the dedup window row, if any
    owner: Row | None = None  # the leader this request would follow
    # Simulate only, for NEW: the plan over time from ``domain.schedule.plan``.
    plan: tuple[schedule.Step, ...] = ()
    accepted_at: datetime | None = None


class Handoff(Protocol):
    """The local dispatcher (``workers.dispatch.Dispatcher``), to which a group commit
    hands the due leaders it inserts already leased: they skip the claim transaction
    and the wake-up before it."""

    def can_deliver(self, row: Row) -> bool: ...

    def reserve(self, wanted: int) -> int: ...

    def lease_new(self, row: dict[str, Any], now: datetime) -> tuple[Any, list[NewEvent]]: ...

    def hand_over(self, reserved: int, claims: Sequence[Any]) -> None: ...


@dataclass(frozen=True)
class _Pending:
    """One validated SendNotification waiting for its group commit."""

    principal: str
    req: SendRequest
    key: str
    fingerprint: str
    trace_context: dict[str, str]


class Intake:
    def __init__(
        self,
        db: Database,
        defaults: ServerDefaults,
        clock: Clock,
        metrics: Metrics | None = None,
        *,
        max_batch: int = MAX_BATCH_DEFAULT,
        handoff: Handoff | None = None,
    ) -> None:
        self._db = db
        self._handoff = handoff
        self._defaults = defaults
        self._clock = clock
        self._metrics = metrics or Metrics.noop()
        self._group: GroupCommit[_Pending, SendResult] = GroupCommit(
            self._commit, max_batch=max_batch
        )

    async def simulate(self, principal: str, req: SendRequest) -> Decision:
        """Exactly Send's decision, from a read transaction: nothing is written."""
        now = self._clock()
        validate_send(req, now)
        key, fingerprint = _keys(principal, req)
        async with self._db.read() as conn:
            existing = await notifications.by_key(conn, key)
            if existing is not None:
                return _existing(existing, fingerprint)
            active = await policies.active(conn, req.notification_type)
            decision = await self._decide_new(conn, principal, req, active, now)
        if decision.outcome != Outcome.NEW:
            return decision
        # The same rules as the workers: intake's first attempt, the follow-up worker.
        steps = schedule.plan(now, req.schedule_time, decision.effective.spec.timing, req.intent)
        return replace(decision, plan=tuple(steps), accepted_at=now)

    async def send(self, principal: str, req: SendRequest) -> SendResult:
        validate_send(req, self._clock())
        key, fingerprint = _keys(principal, req)
        # Captured here: the commit runs in the group's task, outside this RPC's span.
        pending = _Pending(principal, req, key, fingerprint, tracing.current_trace_context())
        result, batch_size = await self._group.submit(pending)
        trace.get_current_span().set_attribute("uns.intake.batch_size", batch_size)
        self._observe(result)
        return result

    def _observe(self, result: SendResult) -> None:
        """Count and log the committed outcome; name it on the RPC's span."""
        if result.idempotent_replay:
            self._metrics.idempotent_replay()
            outcome = Outcome.IDEMPOTENT_REPLAY
        elif result.status == Status.DEDUPLICATED:
            outcome = Outcome.DEDUPLICATED
        elif result.dedup_owner_id is not None:
            outcome = Outcome.COALESCED
        else:
            outcome = Outcome.NEW
        if not result.idempotent_replay:
            self._metrics.accepted(outcome.lower())
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
                if not _lost_race(exc):
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
                if not _lost_race(exc) or attempt == _INSERT_RACE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def _commit_group(self, items: Sequence[_Pending]) -> list[SendResult | Exception]:
        """One write transaction for every item: two reads for the whole group (keys,
        ACTIVE policies), one multi-row insert of the new notifications, one append
        of their events. Dedup items lock and write their window rows one by one.
        New leaders go in leased to the local dispatcher as far as it has free slots
        (``Handoff``); it gets their claims once the transaction has committed."""
        now = self._clock()
        results: list[SendResult | Exception] = []
        reserved, claims = 0, []
        try:
            async with self._db.write() as tx:
                conn = tx.conn
                existing = await notifications.by_keys(conn, {i.key for i in items})
                active = await policies.active_many(conn, {i.req.notification_type for i in items})
                group = _Group()
                for item in items:
                    try:
                        results.append(await self._admit(conn, group, item, active, existing, now))
                    except UnsError as exc:  # this item's refusal; it wrote nothing
                        results.append(exc)
                if self._handoff is not None and group.due:
                    mine = [row for row in group.due if self._handoff.can_deliver(row)]
                    reserved = self._handoff.reserve(len(mine))
                    for row in mine[:reserved]:
                        claim, claim_events = self._handoff.lease_new(row, now)
                        claims.append(claim)
                        group.events += claim_events
                await notifications.insert_notifications_before_events(tx, group.rows)
                if group.work or len(group.due) > reserved:
                    tx.signal(TOPIC_WORK)
                await events.append(tx, group.events, now)
        except BaseException:
            claims = []
            raise
        finally:
            if reserved:
                assert self._handoff is not None
                self._handoff.hand_over(reserved, claims)
        self._metrics.intake_group(len(items))
        return results

    async def _admit(
        self,
        conn: AsyncConnection,
        group: _Group,
        item: _Pending,
        active: Mapping[str, PolicyRevision],
        existing: Mapping[str, Row],
        now: datetime,
    ) -> SendResult:
        principal, req = item.principal, item.req
        found = existing.get(item.key)
        if found is not None:
            return _replay(found, _existing(found, item.fingerprint).outcome)
        earlier = group.admitted.get(item.key)
        if earlier is not None:  # the same key twice in one group
            fingerprint, result = earlier
            if fingerprint != item.fingerprint:
                raise _conflict(result.notification_id)
            return replace(result, idempotent_replay=True)
        d = await self._decide_new(conn, principal, req, active.get(req.notification_type), now)
        effective, window, owner = d.effective, d.window, d.owner
        notification_id = str(uuid.uuid4())
        status = Status.DEDUPLICATED if d.outcome == Outcome.DEDUPLICATED else Status.PENDING
        generation: int | None = None
        if owner is not None:
            assert window is not None
            generation = window["generation"]
        elif d.dedup_key is not None:  # lead a new generation
            generation = (window["generation"] + 1) if window is not None else 1
            until = now + timedelta(seconds=effective.dedup_window_seconds)
            if window is None:
                await notifications.insert_dedup_window(
                    conn, d.dedup_key, owner_id=notification_id, generation=generation, until=until
                )
            else:
                await notifications.update_dedup_window(
                    conn, d.dedup_key, owner_id=notification_id, generation=generation, until=until
                )
        owner_id = owner["id"] if owner is not None else None
        first_attempt = schedule.first_attempt_at(
            now, req.schedule_time, effective.quiet_hours, req.intent
        )
        row = _row(
            notification_id,
            principal,
            req,
            item.key,
            item.fingerprint,
            effective,
            status,
            dedup_key=d.dedup_key,
            owner_id=owner_id,
            generation=generation,
            now=now,
            first_attempt=first_attempt,
            trace_context=item.trace_context,
        )
        if d.dedup_key is not None:
            # Written now: a later item of this group may find this one as its owner.
            await notifications.insert_notifications(conn, [row])
            group.work = group.work or (status == Status.PENDING and owner is None)
        else:
            group.rows.append(row)
            if status == Status.PENDING and first_attempt <= now:
                group.due.append(row)
            elif status == Status.PENDING:  # scheduled: never leased early; wake the
                group.work = True  # dispatchers so they sleep until its time
        group.events.append(
            NewEvent(
                notification_id,
                principal,
                req.notification_type,
                EventKind.ACCEPTED,
                {
                    "policy_id": effective.policy_id,
                    "policy_hash": effective.policy_hash,
                    "revision": effective.policy_revision,
                    "effective": effective.to_json(),
                    "effective_hash": effective.effective_hash,
                },
            )
        )
        if owner is not None:
            group.events.append(
                NewEvent(
                    notification_id,
                    principal,
                    req.notification_type,
                    EventKind.DEDUP_LINKED,
                    {
                        "owner_id": owner["id"],
                        "generation": generation,
                        "owner_status": owner["status"],
                    },
                )
            )
        result = SendResult(notification_id, status, False, effective, owner_id)
        group.admitted[item.key] = (item.fingerprint, result)
        return result

    async def _decide_new(
        self,
        conn: AsyncConnection,
        principal: str,
        req: SendRequest,
        active: PolicyRevision | None,
        now: datetime,
    ) -> Decision:
        """The decision for a key not seen before: policy, then dedup coalescing."""
        effective = resolve(req, active, self._defaults)
        if not req.dedup_key:
            return Decision(Outcome.NEW, effective)
        dedup_key = digests.dedup_digest(
            principal, req.source, req.dedup_key, effective.effective_hash
        )
        window = await notifications.dedup_window(conn, dedup_key)
        owner = (
            await notifications.by_id(conn, window["owner_id"])
            if window is not None and window["owner_id"]
            else None
        )
        if (
            window is not None
            and owner is not None
            and lifecycle.coalesces(owner["status"], window["until"], now)
        ):
            outcome = (
                Outcome.DEDUPLICATED if owner["status"] == Status.DELIVERED else Outcome.COALESCED
            )
            return Decision(outcome, effective, dedup_key=dedup_key, window=window, owner=owner)
        return Decision(Outcome.NEW, effective, dedup_key=dedup_key, window=window)


@dataclass
class _Group:
    """What one group commit has admitted so far."""

    rows: list[dict[str, object]] = field(default_factory=list)  # inserted together at the end
    events: list[NewEvent] = field(default_factory=list)
    admitted: dict[str, tuple[str, SendResult]] = field(default_factory=dict)  # key -> (fp, result)
    due: list[dict[str, object]] = field(default_factory=list)  # new leaders in ``rows``
    work: bool = False  # a dedup leader is due (inserted already): wake the dispatchers


def _lost_race(exc: Exception) -> bool:
    """A unique-index race or a deadlock between groups: retrying alone resolves it.
    (asyncpg's errors carry the SQLSTATE; SQLAlchemy's wrap the driver's as ``orig``.)"""
    if isinstance(exc, IntegrityError):
        return True
    sqlstate = getattr(exc, "sqlstate", None) or getattr(getattr(exc, "orig", None), "sqlstate", "")
    return isinstance(sqlstate, str) and (sqlstate.startswith("23") or sqlstate == "40P01")


def _existing(existing: Row, fingerprint: str) -> Decision:
    effective = EffectivePolicy.from_json(existing["notification"]["effective"])
    same = existing["fingerprint"] == fingerprint
    outcome = Outcome.IDEMPOTENT_REPLAY if same else Outcome.IDEMPOTENCY_CONFLICT
    return Decision(outcome, effective, existing=existing)


def _conflict(notification_id: str) -> IdempotencyConflict:
    return IdempotencyConflict(
        "idempotency key already used with a different payload",
        metadata={"notification_id": notification_id},
    )


def _keys(principal: str, req: SendRequest) -> tuple[str, str]:
    """(idempotency digest, payload fingerprint). Without a key every call is new."""
    idem_key = req.idempotency_key or f"auto:{uuid.uuid4()}"
    return digests.idempotency_digest(principal, req.source, idem_key), digests.fingerprint(req)


def _replay(existing: Row, outcome: Outcome) -> SendResult:
    if outcome == Outcome.IDEMPOTENCY_CONFLICT:
        raise _conflict(existing["id"])
    return SendResult(
        notification_id=existing["id"],
        status=Status(existing["status"]),
        idempotent_replay=True,
        effective=EffectivePolicy.from_json(existing["notification"]["effective"]),
        dedup_owner_id=existing["dedup_owner_id"],
    )


def _row(
    notification_id: str,
    principal: str,
    req: SendRequest,
    key: str,
    fingerprint: str,
    effective: EffectivePolicy,
    status: Status,
    *,
    dedup_key: str | None,
    owner_id: str | None,
    generation: int | None,
    now: datetime,
    first_attempt: datetime,
    trace_context: dict[str, str] | None = None,
) -> dict[str, object]:
    ctx = req.autonomy_context
    document: dict[str, object] = {
        "notification_type": req.notification_type,
        "intent": req.intent.value if req.intent else None,
        "title": req.title,
        "message": req.message,
        "source": req.source,
        "idempotency_key": req.idempotency_key,
        "dedup_key": req.dedup_key,
        "correlation_id": req.correlation_id,
        "autonomy_context": (
            {
                "autonomy_mode": ctx.autonomy_mode.value if ctx.autonomy_mode else None,
                "agent_id": ctx.agent_id,
            }
            if ctx
            else None
        ),
        "metadata": dict(req.metadata),
        "effective": effective.to_json(),
    }
    if req.schedule_time is not None:
        document["schedule_time"] = req.schedule_time.astimezone(UTC).isoformat()
    if trace_context:
        # The accepting RPC's span (W3C carrier): dispatch attempts link to it. Not
        # part of the idempotency fingerprint, which is computed from the request.
        document["trace_context"] = trace_context
    return {
        "id": notification_id,
        "key": key,
        "fingerprint": fingerprint,
        "principal": principal,
        "notification_type": req.notification_type,
        "source": req.source,
        "notification": document,
        "status": status.value,
        "priority": effective.priority.rank,
        "delivery_mode": effective.delivery_mode.value,
        "require_ack": effective.require_ack,
        "max_attempts": effective.max_attempts,
        "outcome": {
            "channels_attempted": [],
            "channels_succeeded": [],
            "channels_failed": [],
            "error_message": None,
        },
        "attempts": 0,
        "cycle": 1,
        "cycle_attempts": 0,
        "dedup_key": dedup_key,
        "dedup_owner_id": owner_id,
        "dedup_generation": generation,
        "dedup_successor_id": None,
        "next_attempt": first_attempt,
        "lease_until": None,
        "lease_token": None,
        "provider_effect_may_have_occurred": False,
        "dead_letter": False,
        "delivered_at": None,
        "deadline": None,
        "ack_status": None,
        "actor": None,
        "responded_at": None,
        "response_metadata": None,
        "provider_refs": None,
        "created_at": now,
        "updated_at": now,
        "withdrawn_at": None,
        "withdrawn_by": None,
        "withdraw_reason": None,
        # Looked at by the follow-up worker once its ack is PENDING (after delivery).
        "followup_at": now if effective.spec.timing.follows_up else None,
        "followup_lease_token": None,
        "followup_lease_until": None,
        "reminders_sent": 0,
        "escalations_sent": 0,
        "followup_step": None,
    }
