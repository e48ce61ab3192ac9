"""The acknowledgement decision of ``uns_server.domain.acks.decide_ack``, table-driven:
every outcome and every refusal with its SPEC reason and message."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from uns_server.domain.acks import AckTarget, decide_ack
from uns_server.domain.enums import AckStatus
from uns_server.domain.errors import AckConflict, AckDeadlinePassed, AckNotPending, UnsError

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
PENDING = AckTarget("n1", "DELIVERED", True, "PENDING", LATER, None)
ACKED_BY_ANN = replace(PENDING, ack_status="ACKED", actor="ann")
A, D = AckStatus.ACKED, AckStatus.DISMISSED


@pytest.mark.parametrize(
    ("target", "outcome", "actor", "repeat"),
    [
        (PENDING, A, "ann", False),
        (PENDING, D, "ann", False),
        (ACKED_BY_ANN, A, "ann", True),  # same actor, same outcome: the original answer
        (replace(PENDING, ack_status="DISMISSED", actor="bob"), D, "bob", True),
    ],
)
def test_decide_ack_settles_or_repeats(
    target: AckTarget, outcome: AckStatus, actor: str, repeat: bool
) -> None:
    assert decide_ack(target, outcome, actor, NOW) is repeat


NOT_PENDING_META = {"notification_id": "n1", "ack_state": "NONE", "state": "PENDING"}


@pytest.mark.parametrize(
    ("target", "outcome", "actor", "may_name", "error", "message", "metadata"),
    [
        (
            AckTarget("n1", "PENDING", True, None, None, None),
            A,
            "ann",
            True,
            AckNotPending,
            "the notification has no pending acknowledgement (state PENDING, require_ack True)",
            NOT_PENDING_META,
        ),
        (
            AckTarget("n1", "DELIVERED", False, None, None, None),
            A,
            "ann",
            True,
            AckNotPending,
            "the notification has no pending acknowledgement (state DELIVERED, require_ack False)",
            {**NOT_PENDING_META, "state": "DELIVERED"},
        ),
        (
            replace(PENDING, ack_status="WITHDRAWN", actor="producer"),
            A,
            "ann",
            True,
            AckNotPending,
            "the acknowledgement was withdrawn; nothing is pending",
            {"notification_id": "n1", "ack_state": "WITHDRAWN", "state": "DELIVERED"},
        ),
        (
            replace(PENDING, deadline=NOW),  # the deadline passed, before the sweep
            A,
            "ann",
            True,
            AckDeadlinePassed,
            None,
            {"notification_id": "n1", "ack_state": "PENDING", "deadline": NOW.isoformat()},
        ),
        (
            replace(PENDING, ack_status="TIMED_OUT", actor="uns-timeout-worker"),
            A,
            "uns-timeout-worker",
            True,
            AckDeadlinePassed,
            None,
            {"notification_id": "n1", "ack_state": "TIMED_OUT", "deadline": LATER.isoformat()},
        ),
        (
            ACKED_BY_ANN,
            D,
            "ann",
            True,
            AckConflict,
            "already ACKED by you",
            {"notification_id": "n1", "ack_state": "ACKED", "actor": "ann"},
        ),
        (
            ACKED_BY_ANN,
            A,
            "bob",
            True,
            AckConflict,
            "already ACKED by ann",
            {"notification_id": "n1", "ack_state": "ACKED", "actor": "ann"},
        ),
        (
            ACKED_BY_ANN,
            A,
            "bob",
            False,  # ann is outside bob's tenants: not named
            AckConflict,
            "already ACKED by another actor",
            {"notification_id": "n1", "ack_state": "ACKED"},
        ),
    ],
)
def test_decide_ack_refusals(
    target: AckTarget,
    outcome: AckStatus,
    actor: str,
    may_name: bool,
    error: type[UnsError],
    message: str | None,
    metadata: dict[str, str],
) -> None:
    with pytest.raises(error) as raised:
        decide_ack(target, outcome, actor, NOW, may_name=lambda _a: may_name)
    if message is not None:
        assert str(raised.value.message) == message
    assert dict(raised.value.metadata) == metadata
