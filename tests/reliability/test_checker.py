"""The checker itself, on hand-made histories: it must catch what it is there to catch."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pytest

from tests.reliability.checker import (
    EventView,
    History,
    NotificationView,
    Receipt,
    check,
    fencing,
    timeline_problems,
)

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
_seq = itertools.count(1)


def ev(nid: str, kind: str, **payload: Any) -> EventView:
    seq = next(_seq)
    return EventView(f"e{seq}", seq, nid, kind, payload)


def attempt(
    nid: str, n: int, *, success: bool, status: str, recovered: bool = False, **meta: Any
) -> list[EventView]:
    token = f"tok-{nid}-{n}"
    base = {"attempt": n, "cycle": 1, "cycle_attempt": n}
    return [
        ev(nid, "ATTEMPT_STARTED", **base, recovery_may_repeat_provider_effect=recovered),
        ev(
            nid,
            "CHANNEL_ATTEMPT_STARTED",
            **base,
            channel="hook",
            lease_token=token,
            provider_effect_may_have_occurred=True,
        ),
        ev(
            nid,
            "CHANNEL_ATTEMPT_RESULT",
            **base,
            channel="hook",
            lease_token=token,
            success=success,
            metadata=meta,
        ),
        ev(nid, "DELIVERY_RESULT", **base, status=status, dead_letter=False),
    ]


def accepted(nid: str) -> EventView:
    return ev(nid, "ACCEPTED", effective={"channels": ["hook"]})


def delivered_timeline(nid: str) -> list[EventView]:
    return [accepted(nid), *attempt(nid, 1, success=True, status="DELIVERED")]


def view(nid: str, state: str = "DELIVERED", attempts: int = 1, **kw: Any) -> NotificationView:
    return NotificationView(
        id=nid, idempotency_key=f"k-{nid}", state=state, attempts=attempts, channels=("hook",), **kw
    )


def history(*nids: str) -> History:
    h = History()
    for nid in nids:
        h.ok(f"k-{nid}", nid)
    return h


def rc(webhook_id: str, accepted: bool = True, attempt: int = 1) -> Receipt:
    return Receipt(webhook_id, accepted, attempt=attempt)


def run(h: History, views: list[NotificationView], events: list[EventView], receipts=()):  # type: ignore[no-untyped-def]
    events = sorted(events, key=lambda e: e.sequence)
    return check(h, views, events, receipts, now=NOW, provider_channels=["hook"])


def test_a_clean_history_passes() -> None:
    events = delivered_timeline("a") + delivered_timeline("b")
    report = run(
        history("a", "b"),
        [view("a"), view("b")],
        events,
        [rc("a:hook:1"), rc("b:hook:1")],
    )
    report.assert_ok()
    assert report.counts()["state_delivered"] == 2


def test_catches_a_lost_notification() -> None:
    # "b" was acknowledged to the producer, but the store has never heard of it.
    report = run(history("a", "b"), [view("a")], delivered_timeline("a"), [rc("a:hook:1")])
    assert list(report.lost) == ["b"]
    assert not report.ok


def test_catches_a_stuck_pending_notification_but_not_a_backing_off_one() -> None:
    past, future = NOW - dt.timedelta(seconds=5), NOW + dt.timedelta(seconds=5)
    events = [accepted("a"), accepted("b"), accepted("c")]
    views = [
        view("a", "PENDING", 0, next_attempt_time=past),
        view("b", "PENDING", 0, next_attempt_time=future),
        view("c", "PENDING", 0, next_attempt_time=past, lease_expire_time=future),
    ]
    report = run(history("a", "b", "c"), views, events)
    assert list(report.lost) == ["a"]


def test_dead_lettered_needs_a_recorded_error() -> None:
    events = [accepted("a"), *attempt("a", 1, success=False, status="FAILED")]
    events += [accepted("b"), *attempt("b", 1, success=False, status="FAILED")]
    views = [
        view("a", "FAILED", dead_letter=True, error_message="hook: HTTP 400"),
        view("b", "FAILED", dead_letter=True, error_message=""),
    ]
    report = run(history("a", "b"), views, events)
    assert list(report.lost) == ["b"]


def test_catches_an_unexpected_delivery() -> None:
    report = run(
        history("a"),
        [view("a")],
        delivered_timeline("a"),
        [rc("a:hook:1"), rc("zzz:hook:1"), rc("garbage")],
    )
    assert len(report.unexpected) == 2
    assert not report.ok


def test_unknown_outcome_that_committed_is_recovered_not_unexpected() -> None:
    h = history("a")
    h.error("k-u", "UNAVAILABLE")
    h.error("k-never", "DEADLINE_EXCEEDED")  # never committed: fine either way
    events = delivered_timeline("a") + delivered_timeline("u")
    report = run(
        h,
        [view("a"), view("u")],
        events,
        [rc("a:hook:1"), rc("u:hook:1")],
    )
    report.assert_ok()
    assert report.recovered == ["u"] and report.unknown == 2 and report.committed_unknown == 1


def test_catches_an_illegal_timeline() -> None:
    # Attempt results before the attempt started, and DELIVERED twice.
    bad = [
        ev("a", "ACCEPTED", effective={"channels": ["hook"]}),
        ev("a", "CHANNEL_ATTEMPT_RESULT", attempt=1, channel="hook", lease_token="t", success=True),
        *attempt("a", 1, success=True, status="DELIVERED"),
        ev("a", "DELIVERY_RESULT", attempt=1, cycle=1, status="DELIVERED"),
    ]
    report = run(history("a"), [view("a")], bad, [rc("a:hook:1")])
    assert "a" in report.illegal
    text = " ".join(report.illegal["a"])
    assert "never started" in text and "already settled" in text
    assert not report.ok


@pytest.mark.parametrize(
    ("events", "fragment"),
    [
        ([ev("x", "ATTEMPT_STARTED", attempt=1, cycle=1)], "first event is not ACCEPTED"),
        (
            [accepted("x"), ev("x", "ACKED", actor="r")],
            "acks only follow DELIVERED",
        ),
        (
            [accepted("x"), *attempt("x", 2, success=True, status="DELIVERED")],
            "does not follow attempt 0",
        ),
        (
            [accepted("x"), *attempt("x", 1, success=False, status="DELIVERED")],
            "never accepted it",
        ),
        (
            [
                accepted("x"),
                *attempt("x", 1, success=True, status="DELIVERED"),
                *attempt("x", 2, success=True, status="DELIVERED"),
            ],
            "attempt started in state DELIVERED",
        ),
        (
            # The second attempt claims a row whose first attempt never settled,
            # without flagging that the provider effect may repeat.
            [
                accepted("x"),
                *attempt("x", 1, success=True, status="DELIVERED")[:2],
                *attempt("x", 2, success=True, status="DELIVERED"),
            ],
            "recovery_may_repeat_provider_effect=False",
        ),
    ],
)
def test_timeline_rules(events: list[EventView], fragment: str) -> None:
    problems = timeline_problems(events)
    assert any(fragment in p for p in problems), problems


def test_timeline_must_end_where_the_api_says() -> None:
    problems = timeline_problems(delivered_timeline("x"), view("x", "FAILED"))
    assert any("API reports FAILED" in p for p in problems)


def test_a_fenced_late_settlement_is_legal() -> None:
    # Attempt 1 stalls past its lease; attempt 2 (recovered) delivers; attempt 1's
    # result lands late and is fenced with LEASE_LOST.
    head = accepted("x")
    first = attempt("x", 1, success=True, status="DELIVERED")
    events = [
        head,
        *first[:2],
        *attempt("x", 2, success=True, status="DELIVERED", recovered=True),
    ]
    events.append(ev("x", "CHANNEL_ATTEMPT_RESULT", **{**first[2].payload}))
    events.append(
        ev(
            "x",
            "LEASE_LOST",
            attempt=1,
            lease_token="tok-x-1",
            provider_effect_may_have_occurred=True,
        )
    )
    assert timeline_problems(events, view("x", attempts=2)) == []


def interrupted_settlement(nid: str, n: int, status: str = "FAILED") -> EventView:
    base = {"attempt": n, "cycle": 1, "cycle_attempt": n}
    return ev(nid, "DELIVERY_RESULT", **base, status=status, dead_letter=True, interrupted=True)


def test_an_interrupted_last_attempt_settled_by_recovery_is_legal() -> None:
    # Attempt 1 (the only one allowed) never reports back; the worker that recovers
    # its lease settles it FAILED. If its worker was alive after all, its late result
    # and LEASE_LOST still fit; a replay's first attempt is not a recovery.
    head = accepted("x")
    first = attempt("x", 1, success=True, status="DELIVERED")
    events = [head, *first[:2], interrupted_settlement("x", 1)]
    assert timeline_problems(events, view("x", "FAILED")) == []
    late = ev("x", "CHANNEL_ATTEMPT_RESULT", **{**first[2].payload})
    lost = ev(
        "x", "LEASE_LOST", attempt=1, lease_token="tok-x-1", provider_effect_may_have_occurred=True
    )
    replay = ev("x", "REPLAY_REQUESTED", cycle=2)
    second = [
        ev(
            "x",
            "ATTEMPT_STARTED",
            attempt=2,
            cycle=2,
            cycle_attempt=1,
            recovery_may_repeat_provider_effect=False,
        )
    ]
    walk = [*events, late, lost, replay, *second]
    assert timeline_problems(walk, view("x", "PENDING", attempts=2)) == []


def test_an_interrupted_settlement_may_follow_the_lease_lost_of_its_attempt() -> None:
    # The slow worker records its result and LEASE_LOST; the worker that recovers the
    # lease, with no attempt left, settles the attempt.
    head = accepted("x")
    first = attempt("x", 1, success=False, status="FAILED")
    lost = ev(
        "x", "LEASE_LOST", attempt=1, lease_token="tok-x-1", provider_effect_may_have_occurred=True
    )
    events = [head, *first[:3], lost, interrupted_settlement("x", 1)]
    assert timeline_problems(events, view("x", "FAILED")) == []


def test_an_interrupted_settlement_only_fails_a_started_attempt() -> None:
    head = accepted("x")
    first = attempt("x", 1, success=True, status="DELIVERED")
    problems = timeline_problems([head, *first[:2], interrupted_settlement("x", 1, "DELIVERED")])
    assert any("can only end in FAILED" in p for p in problems), problems
    settled = [head, *first, interrupted_settlement("x", 1)]
    assert any("already settled" in p for p in timeline_problems(settled)), settled


def test_duplicates_need_an_explanation() -> None:
    # "a": accepted twice, nothing in its timeline admits a repeat -> unexplained.
    # "b": accepted twice after a recovered attempt -> explained.
    # "c": sent twice, accepted once (a retry after a 500) -> not a duplicate.
    a_events, b_head = delivered_timeline("a"), accepted("b")
    b_first = attempt("b", 1, success=True, status="DELIVERED")[:2]
    events = [
        *a_events,
        b_head,
        *b_first,
        *attempt("b", 2, success=True, status="DELIVERED", recovered=True),
        accepted("c"),
        *attempt("c", 1, success=False, status="PENDING", http_status=500),
        *attempt("c", 2, success=True, status="DELIVERED"),
    ]
    receipts = [
        rc("a:hook:1"),
        rc("a:hook:1"),
        rc("b:hook:1", attempt=1),
        rc("b:hook:1", attempt=2),
        rc("c:hook:1", False, attempt=1),
        rc("c:hook:1", attempt=2),
    ]
    views = [view("a"), view("b", attempts=2), view("c", attempts=2)]
    report = run(history("a", "b", "c"), views, events, receipts)
    assert sorted(report.duplicated) == ["a:hook:1", "b:hook:1"]
    assert [d.split(":")[0] for d in report.duplicated_unexplained] == ["a"]
    assert report.explained == {"abandoned": 1} and report.repeats == 2
    # "b"'s first worker died before it recorded the provider's answer.
    assert report.unrecorded_observations == ["b:hook:1 attempt 1"]
    assert report.resent == 3
    assert not report.ok


def dup_timeline(nid: str, flag_on: int) -> list[EventView]:
    """Three attempts, the third delivers; only attempt ``flag_on`` failed in a way that
    says the provider may have acted (a timeout), the other failure is a clean 400."""
    events = [accepted(nid)]
    for n in (1, 2):
        events += attempt(
            nid,
            n,
            success=False,
            status="PENDING",
            provider_effect_possible=n == flag_on,
            http_status=None if n == flag_on else 400,
        )
    return events + attempt(nid, 3, success=True, status="DELIVERED")


def test_a_duplicate_is_explained_only_by_the_attempt_it_repeats() -> None:
    # Attempts 2 and 3 were both accepted: attempt 3 repeats attempt 2's effect. "ok"
    # flags attempt 2 (its client timed out after the provider acted): explained. "bad"
    # flags attempt 1, which the provider never accepted: a flag elsewhere in the
    # history must not explain attempt 2's repeat.
    events = dup_timeline("ok", flag_on=2) + dup_timeline("bad", flag_on=1)
    receipts = [
        rc(f"{nid}:hook:1", accepted=n > 1, attempt=n) for nid in ("ok", "bad") for n in (1, 2, 3)
    ]
    views = [view("ok", attempts=3), view("bad", attempts=3)]
    report = run(history("ok", "bad"), views, events, receipts)
    assert sorted(report.duplicated) == ["bad:hook:1", "ok:hook:1"]
    assert report.explained == {"effect_possible": 1}
    assert [d.split(":")[0] for d in report.duplicated_unexplained] == ["bad"]
    assert not report.ok


def test_a_fenced_attempt_explains_the_repeat_of_its_own_acceptance() -> None:
    # Attempt 1 was fenced (LEASE_LOST), attempt 2 recovered it: the provider accepting
    # both is explained.
    head = accepted("x")
    first = attempt("x", 1, success=True, status="DELIVERED")
    events = [
        head,
        *first[:2],
        *attempt("x", 2, success=True, status="DELIVERED", recovered=True),
        ev("x", "CHANNEL_ATTEMPT_RESULT", **first[2].payload),
        ev(
            "x",
            "LEASE_LOST",
            attempt=1,
            lease_token="tok-x-1",
            provider_effect_may_have_occurred=True,
        ),
    ]
    fenced = run(
        history("x"),
        [view("x", attempts=2)],
        events,
        [rc("x:hook:1", attempt=1), rc("x:hook:1", attempt=2)],
    )
    fenced.assert_ok()
    assert fenced.explained == {"lease_lost": 1}
    # Attempt 1 (the fenced one) accepted twice: its flag explains a later attempt
    # repeating it, not a second acceptance of its own single request.
    twice = run(
        history("x"),
        [view("x", attempts=2)],
        events,
        [rc("x:hook:1", attempt=1), rc("x:hook:1", attempt=1), rc("x:hook:1", attempt=2)],
    )
    assert twice.explained == {"lease_lost": 1}
    assert len(twice.duplicated_unexplained) == 1
    assert "attempt 1 repeated attempt 1" in twice.duplicated_unexplained[0]


def retried_timeline(nid: str) -> list[EventView]:
    head = accepted(nid)
    return [
        head,
        *attempt(nid, 1, success=False, status="PENDING", http_status=500),
        *attempt(nid, 2, success=True, status="DELIVERED"),
    ]


@pytest.mark.parametrize(
    ("receipt", "attributed"),
    [
        (rc("a:hook:1", attempt=2), True),
        (rc("a:hook:1", attempt=3), False),  # no attempt 3 was ever started
        (Receipt("a:hook:1", True), False),  # the request does not say which attempt
        (rc("a:hook:2", attempt=2), False),  # attempt 2 ran in cycle 1, not 2
        (rc("a:other:1", attempt=2), False),  # attempt 2 never started that channel
    ],
)
def test_a_provider_request_no_attempt_accounts_for_fails_the_run(
    receipt: Receipt, attributed: bool
) -> None:
    # Two attempts were committed and the provider saw two requests, but the second
    # request must belong to attempt 2 (counting requests against attempts is not enough).
    report = run(
        history("a"),
        [view("a", attempts=2)],
        retried_timeline("a"),
        [rc("a:hook:1", False, attempt=1), receipt],
    )
    assert report.ok is attributed
    assert len(report.unattributed) == (0 if attributed else 1)


def test_a_provider_request_for_no_accepted_send_fails_the_run() -> None:
    # "q" is in the store, but its send was refused outright (a definite answer): the
    # provider must never see it.
    h = history("a")
    h.error("k-q", "INVALID_ARGUMENT")
    views = [view("a"), view("q")]
    events = delivered_timeline("a") + delivered_timeline("q")
    report = run(h, views, events, [rc("a:hook:1"), rc("q:hook:1")])
    assert any(u.startswith("provider saw 'q:hook:1'") for u in report.unexpected)
    assert not report.ok


def test_a_retried_unknown_outcome_is_recovered_once() -> None:
    # "r": the first call timed out, the retry with the same key answered OK -> recovered.
    # "s": answered OK first time -> not recovered.
    h = History()
    h.error("k-r", "DEADLINE_EXCEEDED")
    h.ok("k-r", "r")
    h.ok("k-s", "s")
    events = delivered_timeline("r") + delivered_timeline("s")
    report = run(h, [view("r"), view("s")], events, [rc("r:hook:1"), rc("s:hook:1")])
    report.assert_ok()
    assert report.recovered == ["r"] and report.ok_after_unknown == 1
    assert report.sends == 2 and report.calls == 3 and report.unknown == 0


def test_two_notifications_for_one_idempotency_key_are_unexpected() -> None:
    # The retry after an unknown outcome created a second notification instead of
    # answering the first one's id.
    h = History()
    h.error("k-r", "UNAVAILABLE")
    h.ok("k-r", "r2")
    events = delivered_timeline("r1") + delivered_timeline("r2")
    views = [
        NotificationView(
            id=i, idempotency_key="k-r", state="DELIVERED", attempts=1, channels=("hook",)
        )
        for i in ("r1", "r2")
    ]
    report = run(h, views, events, [rc("r1:hook:1"), rc("r2:hook:1")])
    assert any("second notification for idempotency key" in u for u in report.unexpected)
    assert not report.ok


def test_delivered_without_provider_acceptance_is_flagged() -> None:
    report = run(history("a"), [view("a")], delivered_timeline("a"), [rc("a:hook:1", False)])
    assert report.false_delivered and not report.ok


def test_stream_order_and_exactly_once() -> None:
    events = delivered_timeline("a")
    shuffled = [events[0], events[2], events[1], *events[3:], events[-1]]
    report = check(history("a"), [view("a")], shuffled, [rc("a:hook:1")], now=NOW)
    assert any("after" in s for s in report.stream)
    assert any("twice" in s for s in report.stream)


def test_withdrawal_and_follow_ups_are_legal_where_the_rules_allow() -> None:
    # A withdrawn attempt in flight: its result and LEASE_LOST follow WITHDRAWN.
    head = accepted("w")
    first = attempt("w", 1, success=True, status="DELIVERED")
    events = [
        head,
        *first[:2],
        ev("w", "WITHDRAWN", actor="alice", reason="", scope="NOTIFICATION"),
        ev("w", "CHANNEL_ATTEMPT_RESULT", **first[2].payload),
        ev(
            "w",
            "LEASE_LOST",
            attempt=1,
            lease_token="tok-w-1",
            provider_effect_may_have_occurred=True,
        ),
    ]
    assert timeline_problems(events, view("w", "WITHDRAWN")) == []
    # Reminders and a step while the ack is pending, then the ack is withdrawn and a
    # reminder in flight is fenced.
    events = [
        *delivered_timeline("r"),
        ev("r", "REMINDER_SENT", number=1),
        ev("r", "ESCALATED", step=1),
        ev("r", "WITHDRAWN", actor="alice", reason="", scope="ACK"),
        ev("r", "LEASE_LOST", follow_up="REMINDER", provider_effect_may_have_occurred=True),
    ]
    assert timeline_problems(events, view("r")) == []


@pytest.mark.parametrize(
    ("tail", "fragment"),
    [
        ([ev("z", "WITHDRAWN", scope="NOTIFICATION")], "withdrawn in state DELIVERED"),
        ([ev("z", "ACKED"), ev("z", "WITHDRAWN", scope="ACK")], "ack withdrawn in state"),
    ],
)
def test_withdrawal_rules(tail: list[EventView], fragment: str) -> None:
    problems = timeline_problems([*delivered_timeline("z"), *tail])
    assert any(fragment in p for p in problems), problems


def test_a_follow_up_before_delivery_is_illegal() -> None:
    problems = timeline_problems([accepted("f"), ev("f", "REMINDER_SENT", number=1)])
    assert any("REMINDER_SENT in state PENDING" in p for p in problems), problems


def test_fencing_tokens_only_move_forward() -> None:
    """A superseded claim's late result is recorded and its settlement refused; a
    claim that goes back, a reused token or a settlement by a superseded claim is not."""
    fine = [
        accepted("a"),
        ev("a", "ATTEMPT_STARTED", attempt=1, cycle=1),
        ev("a", "CHANNEL_ATTEMPT_STARTED", attempt=1, channel="hook", lease_token="t1"),
        ev("a", "ATTEMPT_STARTED", attempt=2, cycle=1, recovery_may_repeat_provider_effect=True),
        ev("a", "CHANNEL_ATTEMPT_STARTED", attempt=2, channel="hook", lease_token="t2"),
        ev("a", "CHANNEL_ATTEMPT_RESULT", attempt=1, channel="hook", lease_token="t1"),
        ev("a", "LEASE_LOST", attempt=1, lease_token="t1"),
        ev("a", "CHANNEL_ATTEMPT_RESULT", attempt=2, channel="hook", lease_token="t2"),
        ev("a", "DELIVERY_RESULT", attempt=2, status="DELIVERED"),
    ]
    found = fencing(fine)
    assert found.counts() == {"claims": 2, "refused": 1, "backwards": 0}
    for broken, fragment in (
        ([*fine[:3], ev("a", "ATTEMPT_STARTED", attempt=1, cycle=1)], "claims attempt 1"),
        (
            [
                *fine[:4],
                ev("a", "CHANNEL_ATTEMPT_STARTED", attempt=2, channel="hook", lease_token="t1"),
            ],
            "reused",
        ),
        ([*fine[:5], ev("a", "DELIVERY_RESULT", attempt=1, status="DELIVERED")], "settled after"),
        ([*fine[:5], ev("a", "LEASE_LOST", attempt=1, lease_token="t2")], "did not claim"),
    ):
        problems = fencing(broken).problems
        assert len(problems) == 1 and fragment in problems[0], problems
