"""A settled lease's move (``domain.moves.SettleAttempt``, ``ExhaustAttempt``) in
storage terms: the columns it sets, and the bind parameters of the fenced statements
``store.dispatch`` groups by those columns (one compiled statement per group)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from uns_server.domain import ack_deadlines, follow_up_jobs
from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.jobs import NewJob
from uns_server.domain.moves import ExhaustAttempt, LeasedMove, SettleAttempt
from uns_server.store.deliveries import SettleDelivery, settled


def columns(move: LeasedMove, now: datetime) -> dict[str, Any]:
    """The columns a settled lease sets: its move in storage terms (the lease, on the
    delivery job, is released by ``store.deliveries.settle``)."""
    values: dict[str, Any] = {"updated_at": now}
    if isinstance(move, ExhaustAttempt):
        return values | {
            "status": move.status.value,
            "dead_letter": move.dead_letter,
            "outcome": move.outcome,
            "attempts": move.attempts,
            "cycle_attempts": move.cycle_attempts,
        }
    s = move.settlement
    values |= {
        "outcome": s.outcome,
        "status": s.status.value,
        "attempts": move.attempts,
        "cycle_attempts": move.cycle_attempts,
    }
    if s.status == Status.DELIVERED:
        values["delivered_at"] = s.delivered_at
        if s.ack_status is not None:
            values |= {"ack_status": s.ack_status.value, "deadline": s.deadline}
    elif s.status == Status.FAILED:
        values["dead_letter"] = s.dead_letter
    else:
        values["next_attempt"] = s.next_attempt
    if move.provider_refs is not None:
        values["provider_refs"] = move.provider_refs
    return values


def seen(move: LeasedMove) -> int:
    """The row's attempts as the move's claim saw them (part of its fence:
    ``deliveries.held_by``): a settled attempt counts one more, an exhausted row keeps
    them."""
    return move.attempts if isinstance(move, ExhaustAttempt) else move.attempts - 1


def first_per_row(moves: Sequence[LeasedMove]) -> list[LeasedMove]:
    """Each row's first move: it releases the lease (its job's), so a second one under
    the same token would find nothing to settle, and lands nowhere."""
    seen: set[str] = set()
    firsts = []
    for move in moves:
        if move.notification_id not in seen:
            seen.add(move.notification_id)
            firsts.append(move)
    return firsts


def grouped(
    moves: Iterable[LeasedMove], now: datetime, *, unexpired: bool
) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Each move's bind parameters, grouped by the columns it sets (one statement per
    group); ``unexpired``: the fence also holds ``now`` (the lease must not have run out)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for move in moves:
        values = columns(move, now)
        params = {f"v_{c}": v for c, v in values.items()}
        params |= {"b_id": move.notification_id, "b_token": move.token, "b_seen": seen(move)}
        if unexpired:
            params["b_now"] = now
        groups.setdefault(tuple(sorted(values)), []).append(params)
    return groups


def deadline_timers(moves: Iterable[LeasedMove]) -> list[tuple[LeasedMove, NewJob]]:
    """The moves that open an ack (DELIVERED, ack PENDING until a deadline), each with
    the jobs to insert in the commit that lands it: the ``ack_deadline`` timer and,
    when the policy follows up, the first ``follow_up``."""
    timers: list[tuple[LeasedMove, NewJob]] = []
    for move in moves:
        if not isinstance(move, SettleAttempt):
            continue
        s = move.settlement
        if s.status != Status.DELIVERED or s.ack_status != AckStatus.PENDING:
            continue
        if s.deadline is not None:
            timers.append((move, ack_deadlines.timer(move.notification_id, s.deadline)))
        if s.follow_up_at is not None:
            timers.append((move, follow_up_jobs.timer(move.notification_id, s.follow_up_at)))
    return timers


def delivery_settles(moves: Iterable[LeasedMove]) -> list[tuple[LeasedMove, SettleDelivery]]:
    """Each move with where it leaves its notification's delivery job (written in the
    commit that lands it: ``store.deliveries.settle``)."""
    out: list[tuple[LeasedMove, SettleDelivery]] = []
    for move in moves:
        if isinstance(move, ExhaustAttempt):
            out.append((move, settled(move.notification_id, move.token, move.status, None)))
        else:
            s = move.settlement
            job = settled(move.notification_id, move.token, s.status, s.next_attempt)
            out.append((move, job))
    return out
