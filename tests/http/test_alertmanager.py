"""Alerts in (SPEC §7, issue 44 item 1): ``POST /integrations/alertmanager`` fed the
payloads Alertmanager and Grafana post (tests/http/alertmanager_payloads.py), on SQLite
and PostgreSQL: one notification per alert, a repeated group is a replay, a resolved
alert withdraws its notification (reminders stop, messages are closed), one bad alert
refuses nothing else, and the key must be a producer's."""

from __future__ import annotations

import json
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.http.alertmanager_payloads import (
    alert,
    grafana,
    probe_failure,
    resolved,
    webhook,
)
from tests.http.conftest import Rig
from tests.http.test_json_over_http import _start, error_info
from tests.http.test_openapi_document import DOCUMENT, conforms
from tests.support.policies import activate_policy
from tests.support.server import KEYS
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.domain.schedule import Reminder

PATH = "/integrations/alertmanager"
TYPE = "ops.alert"
OPENAPI = json.loads(DOCUMENT.read_text())


def documented(answer: httpx.Response) -> httpx.Response:
    """``answer``, checked against what the OpenAPI document says of it."""
    responses = OPENAPI["paths"][PATH]["post"]["responses"]
    schema = responses.get(str(answer.status_code), responses["default"])
    body = answer.json()
    assert conforms(OPENAPI, schema["content"]["application/json"]["schema"], body) == []
    return answer


async def post(
    rig: Rig, payload: Any, who: str | None = "alice", query: str = ""
) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if who is not None:
        headers["Authorization"] = f"Bearer {KEYS.get(who, who)}"
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        if isinstance(payload, bytes):
            return documented(await http.post(PATH + query, content=payload, headers=headers))
        return documented(await http.post(PATH + query, json=payload, headers=headers))


async def results(rig: Rig, payload: Any, query: str = "") -> list[dict[str, Any]]:
    answer = await post(rig, payload, query=query)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["results"]
    assert len(found) == len(payload["alerts"])
    return found


async def _paging_policy(db_url: str) -> None:
    """Slack and PagerDuty, an answer owed within an hour, a reminder at 10 minutes."""
    await activate_policy(
        db_url,
        TYPE,
        channels=["alerts-slack", "pager"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        ack_timeout_minutes=60,
        reminder=Reminder(timedelta(minutes=10), 2.0, 1),
    )


GROUP = webhook(
    probe_failure("https://a.example.org", "1a30ba71cca2921f"),
    probe_failure("https://b.example.org", "5c2e4b1d0f9a8e77"),
    alert("9d8c7b6a5f4e3d2c", "https://c.example.org"),  # no annotations
)


async def test_a_firing_group_pages_once_per_alert_and_its_resolution_withdraws_them(
    rig: Rig, db_url: str
) -> None:
    await _paging_policy(db_url)
    first = await results(rig, GROUP)
    assert [r["status"] for r in first] == ["firing"] * 3
    assert [r["idempotentReplay"] for r in first] == [False] * 3
    assert [r["state"] for r in first] == ["NOTIFICATION_STATE_PENDING"] * 3
    ids = [r["notificationId"] for r in first]
    assert len(set(ids)) == 3

    a = await rig.get(ids[0])
    assert (a.notification_type, a.source, a.dedup_key) == (
        TYPE,
        "alertmanager",
        "1a30ba71cca2921f",
    )
    assert a.idempotency_key == "1a30ba71cca2921f@2026-12-07T05:08:45.828Z"
    assert a.title == "BlackBox Probe Failure: https://a.example.org"
    assert a.message == "Instance https://a.example.org has been down for over 5m. Job: http_checks"
    assert dict(a.metadata) == GROUP["alerts"][0]["labels"]
    assert a.intent == t.NOTIFICATION_INTENT_WARNING
    c = await rig.get(ids[2])  # no summary, no description: the name and the labels
    assert c.title == "ProbeFailure"
    assert c.message.splitlines() == [
        "alertname=ProbeFailure",
        "instance=https://c.example.org",
        "job=http_checks",
        "severity=critical",
        f"uns_type={TYPE}",
    ]

    assert await rig.deliver() == 3
    posts = len(rig.fakes.slack("chat.postMessage"))
    assert posts == 3

    # repeat_interval later Alertmanager sends the group again: replays, nothing new,
    # even for the alert whose description now carries another value.
    repeated = webhook(*GROUP["alerts"])
    repeated["alerts"][1] = probe_failure("https://b.example.org", "5c2e4b1d0f9a8e77")
    repeated["alerts"][1]["annotations"]["description"] = "down for 4h"
    again = await results(rig, repeated)
    assert [r["notificationId"] for r in again] == ids
    assert [r["idempotentReplay"] for r in again] == [True] * 3
    assert "note" in again[1] and "note" not in again[0]
    assert await rig.deliver() == 0

    # The group clears: every notification is withdrawn, reason "resolved at source".
    cleared = await results(rig, resolved(GROUP))
    assert [(r["status"], r["notificationId"], r["withdrawn"]) for r in cleared] == [
        ("resolved", nid, True) for nid in ids
    ]
    assert {r["ackState"] for r in cleared} == {"ACK_STATE_WITHDRAWN"}
    for nid in ids:
        n = await rig.get(nid)
        assert (n.state, n.ack_state) == (t.NOTIFICATION_STATE_DELIVERED, t.ACK_STATE_WITHDRAWN)
        (record,) = await rig.ack_records(nid)
        assert (record.new_state, record.ack_metadata["reason"]) == (
            t.ACK_STATE_WITHDRAWN,
            "resolved at source",
        )
    events = await events_until(
        rig.server.stub("alice"),
        pb.WatchEventsRequest(
            notification_ids=ids, kinds=[t.EVENT_KIND_WITHDRAWN], replay_history=True
        ),
        lambda seen: len(seen) == 3,
    )
    assert {e.payload["reason"] for e in events} == {"resolved at source"}
    assert {e.payload["actor"] for e in events} == {"alice"}

    # Every message it sent is closed, and no reminder follows.
    updated = await rig.server.app.message_updater.run_once()
    assert (updated.done, updated.failed) == (6, 0)
    assert len(rig.fakes.slack("chat.update")) == 3
    resolves = [e for e in rig.fakes.pagerduty_events() if e["event_action"] == "resolve"]
    assert len(resolves) == 3
    delivered = a.deliver_time.ToDatetime(tzinfo=UTC)
    rig.clock.offset += delivered + timedelta(minutes=11) - rig.clock()
    assert (await rig.server.app.followups.run_once()).fired == 0

    # Alertmanager sends a resolved group again (it does until it forgets it): the same.
    twice = await results(rig, resolved(GROUP))
    assert [r["withdrawn"] for r in twice] == [True] * 3


async def test_a_resolved_alert_withdraws_only_its_own_episode(rig: Rig, db_url: str) -> None:
    await _paging_policy(db_url)
    pending = probe_failure("https://d.example.org", "0d0d0d0d0d0d0d0d")
    (sent,) = await results(rig, webhook(pending))
    # The same alert firing again later is another episode (another startsAt).
    later = probe_failure(
        "https://d.example.org", "0d0d0d0d0d0d0d0d", starts_at="2026-12-07T07:00:00Z"
    )
    never_sent = probe_failure("https://e.example.org", "0e0e0e0e0e0e0e0e")
    answers = await results(rig, resolved(webhook(later, never_sent, pending)))
    assert answers[0] == {
        "fingerprint": "0d0d0d0d0d0d0d0d",
        "status": "resolved",
        "withdrawn": False,
        "note": "nothing to withdraw: no notification was accepted for this alert",
    }
    assert answers[1]["withdrawn"] is False and "error" not in answers[1]
    # Not delivered yet: the notification itself is withdrawn, no provider is called.
    assert answers[2]["notificationId"] == sent["notificationId"]
    assert (answers[2]["withdrawn"], answers[2]["state"]) == (True, "NOTIFICATION_STATE_WITHDRAWN")
    assert await rig.deliver() == 0
    assert rig.fakes.slack("chat.postMessage") == []

    # Answered before it cleared: there is nothing left to withdraw, which is no error.
    ack = probe_failure("https://f.example.org", "0f0f0f0f0f0f0f0f")
    (acked,) = await results(rig, webhook(ack))
    assert await rig.deliver() == 1
    await rig.server.stub("rita").Acknowledge(
        pb.AcknowledgeRequest(notification_id=acked["notificationId"])
    )
    (late,) = await results(rig, resolved(webhook(ack)))
    assert (late["notificationId"], late["withdrawn"]) == (acked["notificationId"], False)
    assert late["note"].startswith("nothing to withdraw: ")
    assert (await rig.get(acked["notificationId"])).ack_state == t.ACK_STATE_ACKED


async def test_one_bad_alert_refuses_nothing_else(rig: Rig) -> None:
    good = alert("1111111111111111", "https://g.example.org")
    payload = webhook(
        good,
        alert("2222222222222222", "https://h.example.org", uns_type=None),  # no type
        {**alert("3333333333333333", "x"), "labels": {"alertname": 5}},
        {**alert("4444444444444444", "x"), "status": "pending"},
        "not an alert",
        {**alert("5555555555555555", "x"), "fingerprint": ""},
        alert("6666666666666666", "https://i.example.org", uns_type="not a type!"),
        {
            **alert("7777777777777777", "x"),
            "labels": {"email_to": "x@example.org", "uns_type": TYPE},
        },
    )
    answers = await results(rig, payload)
    assert answers[0]["notificationId"] and "error" not in answers[0]
    assert [a["error"]["reason"] for a in answers[1:]] == [
        "INVALID_REQUEST",
        "INVALID_REQUEST",
        "INVALID_REQUEST",
        "INVALID_REQUEST",
        "INVALID_REQUEST",
        "INVALID_REQUEST",
        "RESERVED_METADATA_KEY",
    ]
    fields = [error_info(a["error"])["metadata"].get("fields") for a in answers[1:]]
    assert fields[:5] == [
        "alerts[1].labels.uns_type",
        "alerts[2].labels.alertname",
        "alerts[3].status",
        "alerts[4]",
        "alerts[5].fingerprint",
    ]
    assert fields[5] == "notification_type"
    assert answers[1]["error"]["code"] == "invalid_argument"
    assert "?type=" in answers[1]["error"]["message"]
    # The query parameter names the type for alerts without the label.
    (typed,) = await results(rig, webhook(payload["alerts"][1]), query="?type=ops.info")
    assert (await rig.get(typed["notificationId"])).notification_type == "ops.info"


async def test_grafana_posts_the_same_shape(rig: Rig) -> None:
    payload = grafana(probe_failure("https://j.example.org", "c6eadffa33fcdf37"))
    (answer,) = await results(rig, payload)
    n = await rig.get(answer["notificationId"])
    assert (n.title, n.dedup_key) == (
        "BlackBox Probe Failure: https://j.example.org",
        "c6eadffa33fcdf37",
    )
    (replay,) = await results(rig, payload)
    assert replay["idempotentReplay"] is True


async def test_a_body_that_is_no_webhook_payload_is_refused_whole(rig: Rig) -> None:
    cases: list[tuple[Any, str]] = [
        (b"{not json", "body"),
        ([GROUP], "body"),
        ({**GROUP, "version": "3"}, "version"),
        ({k: v for k, v in GROUP.items() if k != "version"}, "version"),
        ({**GROUP, "alerts": {"a": 1}}, "alerts"),
        ({**GROUP, "alerts": [GROUP["alerts"][0]] * 1001}, "alerts"),
    ]
    for body, field in cases:
        answer = await post(rig, body)
        assert answer.status_code == 400, (field, answer.text)
        info = error_info(answer.json())
        assert (info["reason"], info["metadata"]["fields"]) == ("INVALID_REQUEST", field)
    assert await rig.deliver() == 0


async def test_the_key_must_be_a_producers(rig: Rig) -> None:
    for payload in (GROUP, resolved(GROUP), webhook()):  # the key is checked first, always
        for who, status, reason in (
            (None, 401, "UNAUTHENTICATED"),
            ("uns_not_a_key", 401, "UNAUTHENTICATED"),
            ("rita", 403, "PERMISSION_DENIED"),  # a responder
            ("oscar", 403, "PERMISSION_DENIED"),  # an operator
        ):
            answer = await post(rig, payload, who=who)
            assert answer.status_code == status, (who, answer.text)
            assert error_info(answer.json())["reason"] == reason
    # Another producer's alerts are its own: bob's resolved group withdraws nothing of alice's.
    (mine,) = await results(rig, webhook(GROUP["alerts"][0]))
    answer = await post(rig, resolved(webhook(GROUP["alerts"][0])), who="bob")
    assert answer.json()["results"][0]["withdrawn"] is False
    assert (await rig.get(mine["notificationId"])).state == t.NOTIFICATION_STATE_PENDING


async def test_a_spent_budget_refuses_the_whole_payload(tmp_path: Path) -> None:
    """Two tokens, hardly refilled: a firing alert takes one, its resolution the other
    (Simulate) and then has none for the withdrawal; both are refused whole (429 with
    Retry-After: Alertmanager sends the group again later, and what was done replays)."""
    server = await _start(
        tmp_path, dispatch_enabled=False, rate_limit_per_second=0.001, rate_limit_burst=2
    )
    try:
        rig = Rig(server, None, None, None)  # type: ignore[arg-type]  # only base_url
        one = webhook(GROUP["alerts"][0])
        (sent,) = await results(rig, one)
        for payload in (resolved(one), webhook(*GROUP["alerts"])):
            answer = await post(rig, payload)
            assert answer.status_code == 429 and "Retry-After" in answer.headers
            assert error_info(answer.json())["reason"] == "RATE_LIMITED"
        got = await server.stub("oscar").GetNotification(  # alice's budget is spent
            pb.GetNotificationRequest(notification_id=sent["notificationId"])
        )
        assert got.notification.state == t.NOTIFICATION_STATE_PENDING  # not withdrawn
    finally:
        await server.stop()
