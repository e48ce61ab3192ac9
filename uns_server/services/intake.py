"""Accepting obligations: SendNotification and Simulate (seed 000 §1.1, SPEC §2).

Order of checks: validation, policy resolution (POLICY_OVERRIDE), then one write
transaction that decides idempotency and dedup and appends the ACCEPTED event.
A refused request writes nothing: every refusal happens before or inside that
transaction, which then rolls back.

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from opentelemetry import trace
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain import digests
from uns_server.domain.enums import EventKind, Status
from uns_server.domain.errors import IdempotencyConflict
from uns_server.domain.policy import EffectivePolicy, ServerDefaults, resolve
from uns_server.domain.requests import SendRequest
from uns_server.domain.validation import validate_send
from uns_server.observability import tracing
from uns_server.observability.metrics import Metrics
from uns_server.store import events, notifications, policies
from uns_server.store.db import TOPIC_WORK, Database
from uns_server.store.events import NewEvent

log = logging.getLogger("uns.intake")
Clock = Callable[[], datetime]

# Concurrent first sends of one key (or one dedup window) race on a unique index;
# the loser retries and then sees the winner's committed row.
_INSERT_RACE_RETRIES = 5


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
    existing: RowMapping | None = None  # the idempotency match
    dedup_key: str | None = None
    window: RowMapping | None = None  # the dedup window row, if any
    owner: RowMapping | None = None  # the leader this request would follow


class Intake:
    def __init__(
        self,
        db: Database,
        defaults: ServerDefaults,
        clock: Clock,
        metrics: Metrics | None = None,
    ) -> None:
        self._db = db
        self._defaults = defaults
        self._clock = clock
        self._metrics = metrics or Metrics.noop()

    async def simulate(self, principal: str, req: SendRequest) -> Decision:
        """Exactly Send's decision, from a read transaction: nothing is written."""
        validate_send(req)
        key, fingerprint = _keys(principal, req)
        async with self._db.read() as conn:
            return await self._decide(conn, principal, req, key, fingerprint, self._clock())

    async def send(self, principal: str, req: SendRequest) -> SendResult:
        validate_send(req)
        key, fingerprint = _keys(principal, req)
        for attempt in range(_INSERT_RACE_RETRIES):
            try:
                result = await self._send_once(principal, req, key, fingerprint)
                break
            except IntegrityError:
                if attempt == _INSERT_RACE_RETRIES - 1:
                    raise
        else:
            raise AssertionError("unreachable")
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

    async def _decide(
        self,
        conn: AsyncConnection,
        principal: str,
        req: SendRequest,
        key: str,
        fingerprint: str,
        now: datetime,
    ) -> Decision:
        existing = await notifications.by_key(conn, key)
        if existing is not None:
            effective = EffectivePolicy.from_json(existing["notification"]["effective"])
            same = existing["fingerprint"] == fingerprint
            outcome = Outcome.IDEMPOTENT_REPLAY if same else Outcome.IDEMPOTENCY_CONFLICT
            return Decision(outcome, effective, existing=existing)
        active = await policies.active(conn, req.notification_type)
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
        if window is not None and owner is not None and _coalesces(owner, window, now):
            outcome = (
                Outcome.DEDUPLICATED if owner["status"] == Status.DELIVERED else Outcome.COALESCED
            )
            return Decision(outcome, effective, dedup_key=dedup_key, window=window, owner=owner)
        return Decision(Outcome.NEW, effective, dedup_key=dedup_key, window=window)

    async def _send_once(
        self, principal: str, req: SendRequest, key: str, fingerprint: str
    ) -> SendResult:
        now = self._clock()
        async with self._db.write() as tx:
            conn = tx.conn
            d = await self._decide(conn, principal, req, key, fingerprint, now)
            if d.existing is not None:
                return _replay(d.existing, d.outcome)
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
                        conn,
                        d.dedup_key,
                        owner_id=notification_id,
                        generation=generation,
                        until=until,
                    )
                else:
                    await notifications.update_dedup_window(
                        conn,
                        d.dedup_key,
                        owner_id=notification_id,
                        generation=generation,
                        until=until,
                    )
            owner_id = owner["id"] if owner is not None else None
            await notifications.insert_notification(
                conn,
                _row(
                    notification_id,
                    principal,
                    req,
                    key,
                    fingerprint,
                    effective,
                    status,
                    dedup_key=d.dedup_key,
                    owner_id=owner_id,
                    generation=generation,
                    now=now,
                    trace_context=tracing.current_trace_context(),
                ),
            )
            new_events = [
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
            ]
            if owner is not None:
                new_events.append(
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
            await events.append(tx, new_events, now)
            if status == Status.PENDING and owner is None:
                tx.signal(TOPIC_WORK)
        return SendResult(notification_id, status, False, effective, owner_id)


def _keys(principal: str, req: SendRequest) -> tuple[str, str]:
    """(idempotency digest, payload fingerprint). Without a key every call is new."""
    idem_key = req.idempotency_key or f"auto:{uuid.uuid4()}"
    return digests.idempotency_digest(principal, req.source, idem_key), digests.fingerprint(req)


def _coalesces(owner: RowMapping, window: RowMapping, now: datetime) -> bool:
    if owner["status"] == Status.PENDING:
        return True
    return bool(owner["status"] == Status.DELIVERED and now < window["until"])


def _replay(existing: RowMapping, outcome: Outcome) -> SendResult:
    if outcome == Outcome.IDEMPOTENCY_CONFLICT:
        raise IdempotencyConflict(
            "idempotency key already used with a different payload",
            metadata={"notification_id": existing["id"]},
        )
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
        "next_attempt": now,
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
        "created_at": now,
        "updated_at": now,
    }
