"""Webhook payloads as Alertmanager (version 4) and Grafana (version 1) post them, for
tests/http/test_alertmanager.py and tests/http/test_alertmanager_binary.py.

The shapes are those of Alertmanager's ``notify/webhook`` ``Message`` (the JSON a
``webhook_configs`` receiver gets, field for field, ``truncatedAlerts`` included) and of
Grafana's contact-point webhook (the same, plus ``orgId``, ``state``, ``title``,
``message`` and per alert ``silenceURL``, ``dashboardURL``, ``panelURL``, ``values``)."""

from __future__ import annotations

import copy
from typing import Any

GROUP_KEY = '{}/{severity="critical"}:{alertname="ProbeFailure"}'
FIRED_AT = "2026-12-07T05:08:45.828Z"
NEVER = "0001-01-01T00:00:00Z"  # endsAt of a firing alert


def alert(
    fingerprint: str,
    instance: str,
    *,
    status: str = "firing",
    starts_at: str = FIRED_AT,
    ends_at: str = NEVER,
    uns_type: str | None = "ops.alert",
    summary: str | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    labels = {
        "alertname": "ProbeFailure",
        "instance": instance,
        "job": "http_checks",
        "severity": "critical",
    }
    if uns_type is not None:
        labels["uns_type"] = uns_type
    annotations = {}
    if summary is not None:
        annotations["summary"] = summary
    if description is not None:
        annotations["description"] = description
    return {
        "status": status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": starts_at,
        "endsAt": ends_at,
        "generatorURL": "http://prometheus.example.org:9090/graph?g0.expr=probe_success+%3D%3D+0",
        "fingerprint": fingerprint,
    }


def probe_failure(instance: str, fingerprint: str, **fields: Any) -> dict[str, Any]:
    return alert(
        fingerprint,
        instance,
        summary=f"BlackBox Probe Failure: {instance}",
        description=f"Instance {instance} has been down for over 5m. Job: http_checks",
        **fields,
    )


def webhook(*alerts: dict[str, Any], version: str = "4") -> dict[str, Any]:
    """The group as Alertmanager posts it; ``status`` is firing while any alert is."""
    firing = any(a["status"] == "firing" for a in alerts)
    common = dict(alerts[0]["labels"]) if alerts else {}
    for other in alerts[1:]:
        common = {k: v for k, v in common.items() if other["labels"].get(k) == v}
    return {
        "receiver": "uns",
        "status": "firing" if firing else "resolved",
        "alerts": list(alerts),
        "groupLabels": {"alertname": "ProbeFailure"},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example.org:9093",
        "version": version,
        "groupKey": GROUP_KEY,
        "truncatedAlerts": 0,
    }


def resolved(payload: dict[str, Any], ends_at: str = "2026-12-07T05:20:45.828Z") -> dict[str, Any]:
    """The same group once every alert cleared: Alertmanager's resolved notification."""
    again = copy.deepcopy(payload)
    for item in again["alerts"]:
        item["status"], item["endsAt"] = "resolved", ends_at
    again["status"] = "resolved"
    return again


def grafana(*alerts: dict[str, Any]) -> dict[str, Any]:
    """Grafana's contact-point webhook: version "1" and fields of its own."""
    payload = webhook(*alerts, version="1")
    payload.update(
        orgId=1,
        state="alerting",
        title="[FIRING:1] ProbeFailure",
        message="**Firing**\n\nValue: B=44.2",
    )
    for item in payload["alerts"]:
        item.update(
            silenceURL="https://grafana.example.org/alerting/silence/new",
            dashboardURL="",
            panelURL="",
            values={"B": 44.23943737541908, "C": 1},
            valueString="[ var='B' labels={} value=44.2 ]",
        )
    return payload
