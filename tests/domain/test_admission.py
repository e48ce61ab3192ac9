"""The send path's idempotency and dedup decision (``domain.admission``), table-driven."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from uns_server.domain.admission import (
    Admit,
    Conflict,
    DedupWindowTake,
    EventToAppend,
    Existing,
    Fresh,
    IdempotentRepeat,
    IntakeDecision,
    SendOutcome,
    WindowOwner,
    accepted_payload,
    decide_admission,
)
from uns_server.domain.enums import DeliveryMode, EventKind, Priority, Status
from uns_server.domain.errors import IdempotencyConflict
from uns_server.domain.policy import EffectivePolicy, PolicySpec
from uns_server.domain.records import DedupWindow

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
WINDOW_SECONDS = 300
SPEC = PolicySpec(
    channels=("slack",),
    delivery_mode=DeliveryMode.GUARANTEED,
    require_ack=False,
    ack_timeout_minutes=15,
    priority=Priority.NORMAL,
    dedup_window_seconds=WINDOW_SECONDS,
    max_attempts=3,
)
EFFECTIVE = EffectivePolicy.of(
    SPEC,
    policy_id=None,
    policy_revision=0,
    policy_hash=None,
)
EXISTING = Existing("held", "fp", Status.DELIVERED, EFFECTIVE, None)
KEY = "d" * 64
NEW_ID = "new"
INSIDE, PAST = NOW + timedelta(seconds=1), NOW  # a window's ``until``: open / just closed


def window(
    owner_id: str | None = "owner", generation: int = 3, until: datetime = INSIDE
) -> DedupWindow:
    return DedupWindow(KEY, until, owner_id, generation)


def decide(read: Existing | Fresh, fingerprint: str = "fp") -> IntakeDecision:
    return decide_admission(fingerprint, read, new_id=NEW_ID, now=NOW)


# -- the idempotency key is held ------------------------------------------------------


@pytest.mark.parametrize("status", list(Status))
def test_the_same_payload_replays_the_holder_whatever_its_state(status: Status) -> None:
    held = Existing("held", "fp", status, EFFECTIVE, "its-owner")
    assert decide(held) == IdempotentRepeat(held)
    assert IdempotentRepeat.outcome == SendOutcome.IDEMPOTENT_REPLAY


def test_another_payload_under_the_key_is_an_idempotency_conflict() -> None:
    decision = decide(EXISTING, fingerprint="other")
    assert decision == Conflict(EXISTING)
    assert isinstance(decision, Conflict)
    error = decision.error()
    assert isinstance(error, IdempotencyConflict)
    assert error.reason == "IDEMPOTENCY_CONFLICT"
    assert error.metadata == {"notification_id": "held"}
    assert decision.outcome == SendOutcome.IDEMPOTENCY_CONFLICT


# -- a new key: leader, follower, deduplicated -------------------------------------------

ACCEPTED = EventToAppend(EventKind.ACCEPTED, accepted_payload(EFFECTIVE))
UNTIL = NOW + timedelta(seconds=WINDOW_SECONDS)


def linked(owner: WindowOwner, generation: int = 3) -> EventToAppend:
    payload = {"owner_id": owner.id, "generation": generation, "owner_status": owner.status.value}
    return EventToAppend(EventKind.DEDUP_LINKED, dict(payload))


def leader(change: DedupWindowTake | None, dedup_key: str | None = KEY) -> Admit:
    generation = change.generation if change else None
    return Admit(
        SendOutcome.NEW, NEW_ID, EFFECTIVE, dedup_key, generation, None, change, (ACCEPTED,)
    )


PENDING_OWNER = WindowOwner("owner", Status.PENDING)
DELIVERED_OWNER = WindowOwner("owner", Status.DELIVERED)


@pytest.mark.parametrize(
    ("fresh", "expected"),
    [
        # no dedup key: a leader with no window
        (Fresh(EFFECTIVE), leader(None, dedup_key=None)),
        # the first send of a dedup key opens generation 1
        (Fresh(EFFECTIVE, KEY), leader(DedupWindowTake(KEY, NEW_ID, 1, UNTIL, insert=True))),
        # a PENDING owner takes the send as a follower, inside its window or past it
        *(
            (
                Fresh(EFFECTIVE, KEY, window(until=until), PENDING_OWNER),
                Admit(
                    SendOutcome.COALESCED,
                    NEW_ID,
                    EFFECTIVE,
                    KEY,
                    3,
                    PENDING_OWNER,
                    None,
                    (ACCEPTED, linked(PENDING_OWNER)),
                ),
            )
            for until in (INSIDE, PAST, NOW - timedelta(days=1))
        ),
        # a DELIVERED owner inside its window: deduplicated at once
        (
            Fresh(EFFECTIVE, KEY, window(), DELIVERED_OWNER),
            Admit(
                SendOutcome.DEDUPLICATED,
                NEW_ID,
                EFFECTIVE,
                KEY,
                3,
                DELIVERED_OWNER,
                None,
                (ACCEPTED, linked(DELIVERED_OWNER)),
            ),
        ),
        # its window has closed (``until`` is exclusive): a new generation takes it
        (
            Fresh(EFFECTIVE, KEY, window(until=PAST), DELIVERED_OWNER),
            leader(DedupWindowTake(KEY, NEW_ID, 4, UNTIL, insert=False)),
        ),
        # an owner that no longer carries the obligation: a new generation
        *(
            (
                Fresh(EFFECTIVE, KEY, window(), WindowOwner("owner", status)),
                leader(DedupWindowTake(KEY, NEW_ID, 4, UNTIL, insert=False)),
            )
            for status in (Status.FAILED, Status.WITHDRAWN, Status.DEDUPLICATED)
        ),
        # the owner's row is gone (pruned), or the window names none
        (
            Fresh(EFFECTIVE, KEY, window(), None),
            leader(DedupWindowTake(KEY, NEW_ID, 4, UNTIL, insert=False)),
        ),
        (
            Fresh(EFFECTIVE, KEY, window(owner_id=None, generation=9), None),
            leader(DedupWindowTake(KEY, NEW_ID, 10, UNTIL, insert=False)),
        ),
    ],
)
def test_a_new_key(fresh: Fresh, expected: Admit) -> None:
    decision = decide(fresh)
    assert decision == expected
    assert isinstance(decision, Admit)
    linked_to = decision.owner is not None
    assert decision.window is None or not linked_to  # only a leader takes the window
    assert decision.owner_id == (decision.owner.id if decision.owner else None)
    expected_status = Status.DEDUPLICATED if expected.outcome == SendOutcome.DEDUPLICATED else None
    assert decision.status == (expected_status or Status.PENDING)


def test_the_new_window_lasts_the_effective_policys_dedup_window() -> None:
    longer = EffectivePolicy.of(
        replace(SPEC, dedup_window_seconds=3600),
        policy_id="p",
        policy_revision=2,
        policy_hash="h",
    )
    decision = decide(Fresh(longer, KEY))
    assert isinstance(decision, Admit) and decision.window is not None
    assert decision.window.until == NOW + timedelta(hours=1)
    [accepted] = decision.events
    assert accepted.payload["revision"] == 2
    assert accepted.payload["effective"] == longer.to_json()


def test_a_held_key_wins_over_any_window() -> None:
    """The key's holder is read first; a replay never looks at dedup at all."""
    assert isinstance(decide(EXISTING), IdempotentRepeat)
