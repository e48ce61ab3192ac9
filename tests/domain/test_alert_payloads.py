"""``domain.alert_payloads``: an Alertmanager alert read into the send it stands for,
table-driven (the HTTP route runs the same payloads end to end in
tests/http/test_alertmanager.py)."""

from __future__ import annotations

from typing import Any

import pytest

from uns_server.domain.alert_payloads import (
    Alert,
    AlertProblem,
    MalformedAlerts,
    parse_webhook,
)


def one(alert: dict[str, Any], notification_type: str = "") -> Alert:
    (parsed,) = parse_webhook({"version": "4", "alerts": [alert]}, notification_type)
    return parsed


def firing(**fields: Any) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": "DiskFull", "instance": "db-1", "uns_type": "ops.disk"},
        "annotations": {"summary": "Disk full", "description": "98% on db-1"},
        "startsAt": "2026-12-07T05:08:45.828Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "1a30ba71cca2921f",
        **fields,
    }


def test_an_alert_becomes_its_send() -> None:
    alert = one(firing())
    assert (alert.status, alert.fingerprint, alert.problem) == ("firing", "1a30ba71cca2921f", None)
    send = alert.send
    assert send is not None
    assert (send.notification_type, send.title, send.message) == (
        "ops.disk",
        "Disk full",
        "98% on db-1",
    )
    assert send.idempotency_key == "1a30ba71cca2921f@2026-12-07T05:08:45.828Z"
    assert send.dedup_key == "1a30ba71cca2921f"
    assert send.metadata == firing()["labels"]
    # The query parameter wins over the label.
    assert (one(firing(), "ops.other").send or send).notification_type == "ops.other"


@pytest.mark.parametrize(
    ("annotations", "labels", "title", "message"),
    [
        ({}, {"alertname": "A", "b": "2"}, "A", "alertname=A\nb=2"),
        ({"summary": "  "}, {"alertname": "A"}, "A", "alertname=A"),
        ({"description": "d"}, {}, "alert 1a30ba71cca2921f", "d"),
        ({"summary": "s" * 300}, {}, "s" * 254 + "…", "s" * 300),
    ],
    ids=["labels", "blank-summary", "no-name", "too-long"],
)
def test_title_and_message_fall_back(
    annotations: dict[str, str], labels: dict[str, str], title: str, message: str
) -> None:
    send = one(firing(annotations=annotations, labels=labels), "ops.disk").send
    assert send is not None
    assert (send.title, send.message) == (title, message)


@pytest.mark.parametrize(
    ("alert", "field"),
    [
        ("x", "alerts[0]"),
        (firing(status="pending"), "alerts[0].status"),
        (firing(fingerprint=""), "alerts[0].fingerprint"),
        (firing(startsAt=5), "alerts[0].startsAt"),
        (firing(labels=["a"]), "alerts[0].labels"),
        (firing(labels={"a": 1}), "alerts[0].labels.a"),
        (firing(annotations={"summary": "\ud800"}), "alerts[0].annotations"),
        (firing(labels={"a": "b\x00"}), "alerts[0].labels.a"),
        (firing(labels={"alertname": "A"}), "alerts[0].labels.uns_type"),
    ],
)
def test_an_alert_that_cannot_be_read_is_its_own_problem(alert: Any, field: str) -> None:
    parsed = one(alert)
    assert parsed.send is None
    assert isinstance(parsed.problem, AlertProblem) and parsed.problem.field == field


@pytest.mark.parametrize(
    ("document", "fields"),
    [
        ([], ["body"]),
        ({}, ["version", "alerts"]),
        ({"version": 4, "alerts": []}, ["version"]),
        ({"version": "4", "alerts": {}}, ["alerts"]),
    ],
)
def test_a_body_that_is_no_payload_is_malformed(document: Any, fields: list[str]) -> None:
    with pytest.raises(MalformedAlerts) as raised:
        parse_webhook(document)
    assert [p.field for p in raised.value.problems] == fields


def test_grafana_s_version_and_extra_fields_are_read() -> None:
    alerts = parse_webhook(
        {"version": "1", "orgId": 1, "state": "alerting", "alerts": [firing(values={"B": 1})]}
    )
    assert alerts[0].send is not None
