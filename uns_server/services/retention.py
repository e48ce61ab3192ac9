"""Retention maintenance: ``run_once(apply, now) -> Report``, the rules in
``uns_server.domain.retention``, the queries behind the store port's ``Retention``.

A dry run (``apply=False``) reads in one read transaction and reports exactly what an
applied run at the same ``now`` would delete. An applied run does it all in one write
transaction (maintenance runs are serialised), in this order:

    1. plan: settled candidates -> drop whole dedup groups that must stay -> prune set
    2. delete the events of the prune set, then stale events of settled rows that stay
    3. delete the prune set, expired dedup windows, then tombstone old idempotency keys
    4. raise the WatchEvents horizon to the highest deleted event sequence
    5. append one RETENTION_APPLIED receipt (last, as every event append must be)

There is no loop here on purpose: ``uns-admin maintain`` (or a scheduler) calls
``run_once``; a backlog larger than one batch reports ``truncated`` and is worked off
by running again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from uns_server.domain import retention as rules
from uns_server.domain.enums import EventKind
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.store.port import NewEvent, ReadTransaction, Store

NOTIFICATIONS = "uns_notifications"
EVENTS = "uns_events"
DEDUP = "uns_dedup"


@dataclass(frozen=True)
class Report:
    """What a run deleted (``applied``) or would delete (dry run)."""

    applied: bool
    operator: str
    cutoffs: rules.Cutoffs
    notification_ids: tuple[str, ...]
    dedup_keys: tuple[str, ...]
    deleted_rows: dict[str, int]
    idempotency_keys_expired: int
    # Settled candidates kept because a row of their dedup group must stay.
    kept_for_dedup_groups: int
    # The WatchEvents horizon after the run (a dry run: what it would be).
    compacted_sequence: int
    # More settled rows than one batch: run again.
    truncated: bool
    receipt_id: str | None = None
    receipt_payload: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "operator": self.operator,
            "cutoff": self.cutoffs.to_json(),
            "deleted_rows": dict(self.deleted_rows),
            "notification_ids": list(self.notification_ids),
            "dedup_keys": list(self.dedup_keys),
            "idempotency_keys_expired": self.idempotency_keys_expired,
            "kept_for_dedup_groups": self.kept_for_dedup_groups,
            "compacted_sequence": self.compacted_sequence,
            "truncated": self.truncated,
            "receipt_id": self.receipt_id,
        }


@dataclass(frozen=True)
class _Plan:
    ids: tuple[str, ...]
    kept: int
    truncated: bool
    events_of_ids: tuple[int, int]  # (count, highest sequence)
    stale: tuple[int, int]
    dedup_keys: tuple[str, ...]
    keys_expired: int


class RetentionService:
    def __init__(
        self,
        store: Store,
        policy: rules.RetentionPolicy,
        *,
        operator: str = rules.RECEIPT_PRINCIPAL,
        limit: int = rules.BATCH_LIMIT_DEFAULT,
    ) -> None:
        if not 1 <= limit <= rules.BATCH_LIMIT_MAX:
            raise InvalidRequest(
                metadata={"fields": "limit"},
                violations=[FieldViolation("limit", f"must be 1-{rules.BATCH_LIMIT_MAX}")],
            )
        self._store = store
        self._policy = policy
        self._operator = operator
        self._limit = limit

    async def run_once(self, apply: bool, now: datetime) -> Report:
        cutoffs = self._policy.cutoffs(now)
        if not apply:
            async with self._store.read() as tx:
                plan = await self._plan(tx, cutoffs, dry_run=True)
                horizon = await tx.retention.compacted_sequence()
            highest = max(plan.events_of_ids[1], plan.stale[1])
            return self._report(plan, cutoffs, applied=False, horizon=max(horizon, highest))
        async with self._store.write() as tx:
            await tx.retention.lock()
            plan = await self._plan(tx, cutoffs, dry_run=False)
            ids = list(plan.ids)
            deleted_events = await tx.retention.delete_events_of(ids)
            if plan.stale[0]:
                deleted_events += await tx.retention.delete_stale_events(
                    cutoffs.events, up_to_sequence=plan.stale[1]
                )
            deleted = {
                NOTIFICATIONS: await tx.retention.delete_notifications(ids),
                EVENTS: deleted_events,
                DEDUP: await tx.retention.delete_windows(plan.dedup_keys, cutoffs.dedup),
            }
            expired = await tx.retention.expire_keys(cutoffs.idempotency)
            highest = max(plan.events_of_ids[1], plan.stale[1])
            horizon = (
                await tx.retention.raise_compacted_sequence(highest, now)
                if deleted_events
                else await tx.retention.compacted_sequence()
            )
            receipt_id = str(uuid.uuid4())
            payload = rules.receipt_payload(
                operator=self._operator,
                cutoffs=cutoffs,
                deleted_rows=deleted,
                notification_ids=ids,
                dedup_keys=plan.dedup_keys,
                idempotency_keys_expired=expired,
                compacted_sequence=horizon,
            )
            await tx.events.append(
                [
                    NewEvent(
                        receipt_id,
                        rules.RECEIPT_PRINCIPAL,
                        rules.RECEIPT_NOTIFICATION_TYPE,
                        EventKind.RETENTION_APPLIED,
                        payload,
                    )
                ],
                now,
            )
        return Report(
            applied=True,
            operator=self._operator,
            cutoffs=cutoffs,
            notification_ids=plan.ids,
            dedup_keys=plan.dedup_keys,
            deleted_rows=deleted,
            idempotency_keys_expired=expired,
            kept_for_dedup_groups=plan.kept,
            compacted_sequence=horizon,
            truncated=plan.truncated,
            receipt_id=receipt_id,
            receipt_payload=payload,
        )

    async def _plan(self, tx: ReadTransaction, cutoffs: rules.Cutoffs, *, dry_run: bool) -> _Plan:
        rows = await tx.retention.settled_before(cutoffs.terminal, self._limit + 1)
        truncated = len(rows) > self._limit
        rows = rows[: self._limit]
        candidates = [r.id for r in rows]
        # Links in both directions, between rows that exist (a target pruned by an
        # earlier run is no reason to keep anything).
        targets = sorted({t for r in rows for t in r.links})
        present = await tx.retention.existing_ids(targets)
        links = [(r.id, t) for r in rows for t in r.links if t in present]
        links += await tx.retention.linked_to(candidates)
        pinned = await tx.retention.live_window_owners(candidates, cutoffs.now)
        keep = rules.prunable(candidates, links, pinned)
        ids = tuple(i for i in candidates if i in keep)
        windows = await tx.retention.expired_windows(cutoffs.dedup)
        return _Plan(
            ids=ids,
            kept=len(candidates) - len(ids),
            truncated=truncated,
            events_of_ids=await tx.retention.events_of(ids),
            stale=await tx.retention.stale_events(cutoffs.events, ids),
            dedup_keys=tuple(windows),
            keys_expired=(
                await tx.retention.expirable_keys(cutoffs.idempotency, ids) if dry_run else 0
            ),
        )

    def _report(
        self, plan: _Plan, cutoffs: rules.Cutoffs, *, applied: bool, horizon: int
    ) -> Report:
        return Report(
            applied=applied,
            operator=self._operator,
            cutoffs=cutoffs,
            notification_ids=plan.ids,
            dedup_keys=plan.dedup_keys,
            deleted_rows={
                NOTIFICATIONS: len(plan.ids),
                EVENTS: plan.events_of_ids[0] + plan.stale[0],
                DEDUP: len(plan.dedup_keys),
            },
            idempotency_keys_expired=plan.keys_expired,
            kept_for_dedup_groups=plan.kept,
            compacted_sequence=horizon,
            truncated=plan.truncated,
        )
