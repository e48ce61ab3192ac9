"""Routing rules and templates (SPEC §7, issue 45) as JSON over HTTP: a policy with
rules and templates is put through the Connect JSON route, an invalid filter is
refused with its field in BadRequest, and Simulate names the matched rule and shows
the rendered message. The bridge is transport only (tests/api covers both dialects),
so SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.http.test_json_over_http import Http, _start, error_info

PUT = "/uns.v1.PolicyService/PutPolicyRevision"
SIMULATE = "/uns.v1.NotificationService/Simulate"


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[Http]:
    server = await _start(tmp_path, dispatch_enabled=False)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.app.http_port}") as session:
            yield Http(session)
    finally:
        await server.stop()


def policy(rule_filter: str) -> dict[str, Any]:
    return {
        "notificationType": "db.replica_lag",
        "activate": True,
        "spec": {
            "channels": ["log"],
            "deliveryMode": "DELIVERY_MODE_GUARANTEED",
            "rules": [{"filter": rule_filter, "channels": ["log"], "urgency": "URGENCY_HIGH"}],
            "templates": [{"channelType": "log", "title": "[{{ metadata.cluster }}] {{ title }}"}],
        },
    }


async def test_rules_and_templates_over_json(http: Http) -> None:
    status, put, _ = await http.call(PUT, policy("metadata.cluster = prod"), who="oscar")
    assert status == 200, put
    assert put["revision"]["spec"]["rules"][0]["filter"] == "metadata.cluster = prod"
    request = {
        "notificationType": "db.replica_lag",
        "intent": "NOTIFICATION_INTENT_WARNING",
        "title": "Replica lag",
        "message": "db-2 is behind",
        "source": "curl",
        "metadata": {"cluster": "prod"},
    }
    status, simulated, _ = await http.call(SIMULATE, {"request": request})
    assert status == 200, simulated
    effective = simulated["effectivePolicy"]
    assert (effective["matchedRuleIndex"], effective["urgency"]) == (0, "URGENCY_HIGH")
    [message] = simulated["plannedSteps"][0]["messages"]
    assert (message["channel"], message["channelType"], message["templateIndex"]) == (
        "log",
        "log",
        0,
    )
    assert message["title"] == "[prod] Replica lag"


async def test_an_invalid_filter_is_refused_with_its_field(http: Http) -> None:
    status, body, _ = await http.call(PUT, policy("metadata.cluster prod"), who="oscar")
    assert (status, body["code"]) == (400, "invalid_argument")
    assert error_info(body)["reason"] == "INVALID_REQUEST"
    [bad] = [d for d in body["details"] if d["type"] == "google.rpc.BadRequest"]
    assert [v["field"] for v in bad["debug"]["fieldViolations"]] == ["spec.rules[0].filter"]
