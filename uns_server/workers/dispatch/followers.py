"""Followers of a settled leader (seed 000 §1.1): a delivered leader satisfies its
pending followers (DEDUPLICATED) and extends its dedup window; an exhausted leader
hands its obligation to its first pending follower (promoted, the others relinked to
it) or else to a newer active owner of its dedup key (``lifecycle.decide_hand_off``).
Each runs inside the leader's settle transaction, and appends its events to
``new_events`` for that transaction to commit."""

from __future__ import annotations

from datetime import datetime, timedelta

from uns_server.domain import lifecycle, moves
from uns_server.domain.enums import EventKind, Status
from uns_server.domain.records import Notification
from uns_server.store.port import TOPIC_WORK, NewEvent, WriteTransaction
from uns_server.workers.dispatch.claims import event


async def after_settle(
    tx: WriteTransaction,
    status: Status | None,
    leader: Notification,
    now: datetime,
    new_events: list[NewEvent],
) -> None:
    """Followers of a leader just settled to ``status``: satisfied by its delivery, or
    handed its obligation when it failed."""
    if status == Status.DELIVERED:
        await satisfy_followers(tx, leader, now, new_events)
    elif status == Status.FAILED:
        await hand_off(tx, leader, now, new_events)


async def satisfy_followers(
    tx: WriteTransaction, leader: Notification, now: datetime, new_events: list[NewEvent]
) -> None:
    if leader.dedup_key is None:
        return
    window = leader.notification.effective.dedup_window_seconds
    # A newer leader that took the window meanwhile keeps it (the move is then lost).
    extend = moves.ExtendWindow(leader.dedup_key, leader.id, now + timedelta(seconds=window))
    await tx.moves.extend_window(extend)
    followers = await tx.dispatch.pending_followers(leader.id)
    satisfy = moves.SatisfyFollowers(leader.id, tuple(f.id for f in followers), now)
    satisfied = set((await tx.moves.satisfy_followers(satisfy)).ids)
    new_events.extend(
        event(
            f,
            EventKind.DEDUP_SATISFIED,
            {
                "previous_owner_id": leader.id,
                "owner_id": leader.id,
                "generation": f.dedup_generation,
            },
        )
        for f in followers
        if f.id in satisfied  # one withdrawn meanwhile stays WITHDRAWN
    )


async def hand_off(
    tx: WriteTransaction, leader: Notification, now: datetime, new_events: list[NewEvent]
) -> None:
    """The exhausted leader's obligation passes to its first pending follower, or
    else to a newer active owner of its dedup key (``lifecycle.decide_hand_off``)."""
    followers = await tx.dispatch.pending_followers(leader.id)
    owner = None
    if not followers and leader.dedup_key is not None:
        owner = await _window_owner(tx, leader.dedup_key)
    decision = lifecycle.decide_hand_off(
        leader_id=leader.id,
        leader_generation=leader.dedup_generation,
        pending_followers=[lifecycle.Follower(f.id, _generation(f)) for f in followers],
        window_owner=owner,
        now=now,
    )
    if decision is None:
        return
    successor_moved = moves.RecordSuccessor(leader.id, decision.successor_id)
    # The leader's row, its promoted follower and its window move only in its own
    # settlement (a follower withdrawn meanwhile is the one race, and promoting it would
    # resurrect it): a lost move rolls the settlement back, to be decided afresh.
    handing_off = f"hand-off of {leader.id}"
    (await tx.moves.record_successor(successor_moved)).expect(handing_off)
    new_events.append(
        event(
            leader,
            EventKind.OBLIGATION_HANDED_OFF,
            {"successor_id": decision.successor_id, "generation": decision.generation},
        )
    )
    if not decision.promoted:  # the newer owner already leads its own window
        return
    successor, rest = followers[0], followers[1:]
    promote = moves.Promote(successor.id, leader.id, now)
    (await tx.moves.promote(promote)).expect(handing_off)
    relink = moves.Relink(decision.relinked, leader.id, successor.id, now)
    relinked = set((await tx.moves.relink(relink)).ids)
    if leader.dedup_key is not None:  # always, for a leader with followers
        window = moves.MoveWindow(leader.dedup_key, leader.id, successor.id)
        (await tx.moves.move_window(window)).expect(handing_off)
    link = {
        "previous_owner_id": leader.id,
        "owner_id": successor.id,
        "generation": decision.generation,
    }
    new_events.append(event(successor, EventKind.DEDUP_OWNER_PROMOTED, link))
    new_events.extend(event(f, EventKind.DEDUP_RELINKED, link) for f in rest if f.id in relinked)
    tx.signal(TOPIC_WORK)


async def _window_owner(tx: WriteTransaction, dedup_key: str) -> lifecycle.DedupOwner | None:
    """The current owner of a dedup window (the window locked, as intake locks it)."""
    found = await tx.dispatch.window_owner(dedup_key)
    if found is None:
        return None
    window, owner = found
    if owner.dedup_generation is None:
        return None
    return lifecycle.DedupOwner(owner.id, owner.status, owner.dedup_generation, window.until)


def _generation(follower: Notification) -> int:
    # Intake gives every row of a dedup key a generation (a follower joins its owner's).
    assert follower.dedup_generation is not None, "a follower without a dedup generation"
    return follower.dedup_generation
