"""Retention rules: what a maintenance run may delete, and what it must keep. Pure.

Seed 004: prune terminal history past its age, never pending work. A run computes
one cutoff per kind of history from ``now`` and a :class:`RetentionPolicy`:

    what                    deleted (or expired) when
    notification row        it is *settled* (DELIVERED, DEDUPLICATED, WITHDRAWN, or FAILED with
                            dead_letter=false; no PENDING ack), its last update and its
                            last event are older than the terminal cutoff, it does not own
                            a live dedup window (``until >= now``), and its whole dedup
                            group can go (below)
    its events              with the row, all of them
    other events            older than the events cutoff, when their notification is
                            settled (timelines of kept rows are trimmed)
    dedup window            ``until`` older than the dedup cutoff and its owner gone or
                            settled (pending ownership outlives the window, seed 000 §2.3)
    idempotency key         the row is settled and was created before the idempotency
                            cutoff: the ``key`` column is rewritten to a tombstone
                            (``expired:<id>``) that no request digest can ever equal

Never deleted: PENDING rows, PENDING acks, unresolved dead letters, any row linked to
one of those, RETENTION_APPLIED receipts, and the audit records (seed 000 §2.4: the
compliance trail is append-only and outlives the operational timeline).

Dedup groups: ``dedup_owner_id`` (follower -> leader) and ``dedup_successor_id``
(exhausted leader -> successor) link rows. A group is pruned whole or not at all, so
a kept row never points at a deleted one: Replay's REPLAY_BLOCKED guard still finds a
dead letter's successor, a pending follower still finds its leader, and a settled
follower is never left pointing at nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from uns_server.domain.enums import ACK_OWED, Status
from uns_server.domain.errors import FieldViolation, InvalidRequest

TERMINAL_DAYS_DEFAULT = 30.0
EVENTS_DAYS_DEFAULT = 30.0
DEDUP_DAYS_DEFAULT = 1.0
# How long a retried SendNotification is recognised as the same request.
IDEMPOTENCY_SECONDS_DEFAULT = 86_400
# Notifications considered per run; a larger backlog is worked off by running again.
BATCH_LIMIT_DEFAULT = 5_000
BATCH_LIMIT_MAX = 10_000

# The receipt: its ``notification_id`` is its own UUID, so no producer ever sees it.
RECEIPT_PRINCIPAL = "uns-maintenance"
RECEIPT_NOTIFICATION_TYPE = "uns.maintenance"
# The receipt lists at most this many notification ids and dedup keys (plus counts).
RECEIPT_LIST_CAP = 100

# ``key`` is NOT NULL UNIQUE and holds a 64-hex-digit SHA-256 digest. "expired:<uuid>"
# is unique (the id is), fits String(64), and contains ':' so it never equals a digest.
TOMBSTONE_PREFIX = "expired:"


def tombstone(notification_id: str) -> str:
    return TOMBSTONE_PREFIX + notification_id


def holds_work(status: str, dead_letter: bool, ack_status: str | None) -> bool:
    """Someone still has to act on this row: dispatch, a responder, or an operator."""
    return (
        status == Status.PENDING
        or ack_status in ACK_OWED
        or (status == Status.FAILED and dead_letter)
    )


@dataclass(frozen=True)
class Cutoffs:
    """History strictly older than each cutoff may go."""

    now: datetime
    terminal: datetime
    events: datetime
    dedup: datetime
    idempotency: datetime

    def to_json(self) -> dict[str, str]:
        return {
            "now": self.now.isoformat(),
            "terminal": self.terminal.isoformat(),
            "events": self.events.isoformat(),
            "dedup": self.dedup.isoformat(),
            "idempotency": self.idempotency.isoformat(),
        }


@dataclass(frozen=True)
class RetentionPolicy:
    terminal_days: float = TERMINAL_DAYS_DEFAULT
    events_days: float = EVENTS_DAYS_DEFAULT
    dedup_days: float = DEDUP_DAYS_DEFAULT
    idempotency_seconds: int = IDEMPOTENCY_SECONDS_DEFAULT

    def __post_init__(self) -> None:
        violations = [
            FieldViolation(name, "must be a number >= 0")
            for name in ("terminal_days", "events_days", "dedup_days", "idempotency_seconds")
            if not getattr(self, name) >= 0  # also refuses NaN
        ]
        if violations:
            fields = ",".join(v.field for v in violations)
            raise InvalidRequest(
                f"{fields}: must be a number >= 0",
                metadata={"fields": fields},
                violations=violations,
            )

    def cutoffs(self, now: datetime) -> Cutoffs:
        return Cutoffs(
            now=now,
            terminal=now - timedelta(days=self.terminal_days),
            events=now - timedelta(days=self.events_days),
            dedup=now - timedelta(days=self.dedup_days),
            idempotency=now - timedelta(seconds=self.idempotency_seconds),
        )


def prunable(
    candidates: Iterable[str], links: Iterable[tuple[str, str]], pinned: Iterable[str]
) -> frozenset[str]:
    """The candidates whose whole dedup group can go.

    ``links`` are (a, b) pairs of existing rows joined by ``dedup_owner_id`` or
    ``dedup_successor_id`` (either direction); ``pinned`` rows stay whatever their
    state. A candidate linked to any row that stays, stays too — to a fixpoint.
    """
    keep = set(candidates) - set(pinned)
    pairs = [(a, b) for a, b in links if a != b]
    changed = True
    while changed:
        changed = False
        for a, b in pairs:
            if (a in keep) != (b in keep):
                keep.discard(a)
                keep.discard(b)
                changed = True
    return frozenset(keep)


def capped(values: Sequence[str]) -> list[str]:
    return sorted(values)[:RECEIPT_LIST_CAP]


def receipt_payload(
    *,
    operator: str,
    cutoffs: Cutoffs,
    deleted_rows: Mapping[str, int],
    notification_ids: Sequence[str],
    dedup_keys: Sequence[str],
    idempotency_keys_expired: int,
    compacted_sequence: int,
) -> dict[str, Any]:
    """The RETENTION_APPLIED payload (seed 000 §3): enough to answer "where did X go?"."""
    return {
        "operator": operator,
        "cutoff": cutoffs.to_json(),
        "deleted_rows": dict(deleted_rows),
        "notification_ids": capped(notification_ids),
        "notification_count": len(notification_ids),
        "dedup_keys": capped(dedup_keys),
        "dedup_key_count": len(dedup_keys),
        "idempotency_keys_expired": idempotency_keys_expired,
        "compacted_sequence": compacted_sequence,
    }
