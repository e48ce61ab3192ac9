"""The console's pure helpers: error classes, the policy diff, chart buckets, health."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from uns_server.domain.enums import EventKind
from uns_server.domain.outcomes import DeliveryOutcome
from uns_server.domain.people import Recipient
from uns_server.domain.records import FailedSummary, RecentEvent
from uns_server.http.console.charts import Series, bar_chart, minute_buckets
from uns_server.http.console.diff import side_by_side
from uns_server.http.console.overview import digest, unmatched
from uns_server.http.console.reading import Names, state_label, step_summary
from uns_server.http.console.triage import NO_ERROR, error_class, group_by


def test_the_same_failure_on_many_notifications_is_one_error_class() -> None:
    a = error_class("hook: HTTP 503: unavailable; mail: 421 try later")
    b = error_class("hook: HTTP 502: unavailable")
    assert a == b == "hook: HTTP N: unavailable"
    assert error_class("slack: ratelimited, retry after 30.5 s") == (
        "slack: ratelimited, retry after N s"
    )
    assert error_class("webhook-id deadbeefcafe01 refused") == "webhook-id N refused"
    assert error_class(None) == error_class("  ") == NO_ERROR


def test_an_error_class_keeps_the_providers_host_and_port() -> None:
    """The endpoint is the channel's, the same on every notification: kept whole,
    while what varies around it still goes."""
    assert error_class("hook: connection refused to 127.0.0.1:9") == (
        "hook: connection refused to 127.0.0.1:9"
    )
    assert error_class("hook: could not connect to hooks.example.com:8443: timed out 3") == (
        "hook: could not connect to hooks.example.com:8443: timed out N"
    )
    assert error_class("hook: could not connect: TLS with [::1]:443 failed") == (
        "hook: could not connect: TLS with [::1]:443 failed"
    )
    assert error_class("mail: could not reach 10.1.2.3 after 2 tries.") == (
        "mail: could not reach 10.1.2.3 after N tries."
    )
    # Not an endpoint: a time, a version, a status.
    assert error_class("at 2026-01-01T12:30 v1.2.3 HTTP 503") == "at N-N-NTN:N vN.N HTTP N"


def test_groups_are_largest_first() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        FailedSummary(
            str(i), t, "tests", "alice", DeliveryOutcome(error_message=e), 4, 1, now, now, None
        )
        for i, (t, e) in enumerate([("a", "hook: HTTP 500"), ("b", "hook: HTTP 503"), ("b", None)])
    ]
    assert [(g.key, g.ids) for g in group_by(rows, "type")] == [("b", ["1", "2"]), ("a", ["0"])]
    by_error = group_by(rows, "error")
    assert [(g.key, len(g.ids)) for g in by_error] == [("hook: HTTP N", 2), (NO_ERROR, 1)]


def test_the_diff_pairs_changed_lines_side_by_side() -> None:
    rows = side_by_side(["{", "  a: 1,", "  b: 2", "}"], ["{", "  a: 1,", "  b: 3,", "  c: 4", "}"])
    assert [(r.tag, r.left, r.right) for r in rows] == [
        ("equal", "{", "{"),
        ("equal", "  a: 1,", "  a: 1,"),
        ("replace", "  b: 2", "  b: 3,"),
        ("replace", "", "  c: 4"),
        ("equal", "}", "}"),
    ]


def test_minute_buckets_and_an_escaped_svg() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    points = [(now - timedelta(minutes=59, seconds=30), 1.0), (now, 2.0), (now, 3.0)]
    points.append((now - timedelta(hours=2), 9.0))  # outside the hour
    buckets = minute_buckets(points, now)
    assert len(buckets) == 60 and buckets[0] == [1.0] and buckets[-1] == [2.0, 3.0]
    svg = bar_chart(Series("<b>rate</b>", [1.0, 2.0], "x"), "t")
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "style=" not in svg


def test_delivery_latency_runs_from_the_accepted_event_or_the_row() -> None:
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)

    def event(kind: str, nid: str, seconds: float, **fields: Any) -> RecentEvent:
        at = t0 + timedelta(seconds=seconds)
        payload = {"channel": None, "success": None, "error": None, "status": None} | fields
        return RecentEvent(sequence=0, kind=EventKind(kind), at=at, notification_id=nid, **payload)

    rows = [
        event("ACCEPTED", "a", 0),
        event("CHANNEL_ATTEMPT_RESULT", "a", 1, channel="hook", success=True),
        event("DELIVERY_RESULT", "a", 2, status="DELIVERED"),
        event("CHANNEL_ATTEMPT_RESULT", "b", 3, channel="hook", success=False, error="HTTP 503"),
        event("DELIVERY_RESULT", "b", 9, status="DELIVERED"),  # accepted before the window
        event("DELIVERY_RESULT", "c", 9, status="FAILED"),
    ]
    assert unmatched(rows) == ["b"]
    recent = digest(rows, {"b": t0 - timedelta(seconds=51)})
    assert sorted(s for _, s in recent.latency) == [2.0, 60.0]
    assert len(recent.delivered) == 2
    hook = recent.channels["hook"]
    assert (hook.attempts, hook.successes, hook.last_error) == (2, 1, "HTTP 503")


def test_a_follow_up_row_says_whom_it_asked_where_and_whom_it_left() -> None:
    bob = Recipient("bob", "Bob Okafor", "Europe/Paris")
    payload = {
        "step": 2,
        "decision": "GAVE_UP",
        "results": [
            {"channel": "pager", "success": False, "error": "HTTP 503"},
            {"channel": "mail", "recipient_id": "bob", "success": True},
        ],
        "recipients_unreachable": [{"recipient_id": "carol", "reason": "no contact"}],
        "recipients_held": [{"recipient_id": "bob", "held_until": "not a time"}],
        "recipients_not_due": [{"recipient_id": "dave", "due_time": ""}],
    }
    assert step_summary(EventKind.ESCALATED, payload, Names({"bob": bob})) == (
        "escalation step 2, gave up: on pager: failed: HTTP 503; "
        "to Bob Okafor (bob) on mail: sent; carol not reached: no contact; "
        "Bob Okafor (bob) held by their quiet hours until not a time; "
        "dave not due a reminder yet"
    )
    assert step_summary(EventKind.REMINDER_SENT, {"number": 1}, Names({})) == "reminder 1"
    after_snooze = {"follow_up": "SNOOZE_REMINDER", "snooze": 2}
    assert step_summary(EventKind.REMINDER_SENT, after_snooze, Names({})) == (
        "reminder at the end of snooze 2"
    )


def test_an_acknowledgement_reads_as_its_answer() -> None:
    def label(status: str, ack: str | None, dead: bool = False) -> tuple[str, str]:
        shown = state_label(status, dead, ack)
        return shown.text, shown.css

    assert label("DELIVERED", "PENDING") == ("Waiting for an answer", "s-waiting")
    assert label("DELIVERED", "ACKED") == ("Acknowledged", "s-delivered")
    assert label("DELIVERED", "TIMED_OUT") == ("Not answered in time", "s-failed")
    assert label("DELIVERED", None) == ("DELIVERED", "s-delivered")
    assert label("FAILED", None, dead=True) == ("FAILED · dead letter", "s-failed")
