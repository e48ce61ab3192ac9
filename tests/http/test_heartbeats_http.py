"""Heartbeats over HTTP (SPEC §7 "Alerts in", issue 44 item 2), on SQLite:
JSON over HTTP for HeartbeatService, and ``POST /heartbeats/{id}`` as curl
sends it from cron (no body, no Content-Type, the key as ``Authorization: Bearer``):
the beat that ends a page withdraws it; every answer as the OpenAPI document says."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.test_json_over_http import error_info
from tests.http.test_openapi_document import DOCUMENT, conforms
from tests.support.server import KEYS, RunningServer, ShiftableClock, start_server

OPENAPI = json.loads(DOCUMENT.read_text())
BEAT = "/heartbeats/{heartbeat_id}"
SERVICE = "/uns.v1.HeartbeatService/"
HEARTBEAT = {
    "heartbeatId": "nightly-backup",
    "notificationType": "demo.alert",
    "interval": "3600s",
    "grace": "300s",
    "title": "The nightly backup did not run",
    "message": "No beat from backup.sh",
}


class Rig:
    def __init__(self, server: RunningServer, clock: ShiftableClock) -> None:
        self.server = server
        self.clock = clock
        self.base_url = f"http://127.0.0.1:{server.app.http_port}"

    async def beat(self, heartbeat_id: str, who: str | None = "alice") -> httpx.Response:
        """As ``curl -fsS -X POST -H "Authorization: Bearer $KEY" .../heartbeats/ID``."""
        headers = {} if who is None else {"Authorization": f"Bearer {KEYS.get(who, who)}"}
        async with httpx.AsyncClient(base_url=self.base_url) as http:
            answer = await http.post(BEAT.format(heartbeat_id=heartbeat_id), headers=headers)
        responses = OPENAPI["paths"][BEAT]["post"]["responses"]
        schema = responses.get(str(answer.status_code), responses["default"])
        body = answer.json()
        assert conforms(OPENAPI, schema["content"]["application/json"]["schema"], body) == []
        assert answer.headers["Content-Type"].startswith("application/json")
        return answer

    async def call(self, path: str, body: dict[str, Any], who: str = "oscar") -> Any:
        headers = {"Authorization": f"Bearer {KEYS[who]}"}
        async with httpx.AsyncClient(base_url=self.base_url) as http:
            answer = await http.post(path, json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        return answer.json()


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    clock = ShiftableClock()
    server = await start_server(
        db_url, tmp_path, clock=clock, dispatch_enabled=False, http_listen="127.0.0.1:0"
    )
    try:
        yield Rig(server, clock)
    finally:
        await server.stop()


async def test_curl_beats_and_the_beat_after_a_silence_withdraws_the_page(rig: Rig) -> None:
    put = await rig.call(SERVICE + "PutHeartbeat", {"heartbeat": HEARTBEAT})
    assert put["heartbeat"]["state"] == "HEARTBEAT_STATE_UP"
    answer = await rig.beat("nightly-backup")
    assert answer.status_code == 200
    beaten = answer.json()["heartbeat"]
    assert beaten["state"] == "HEARTBEAT_STATE_UP" and "lastBeatTime" in beaten
    rig.clock.advance(minutes=66)
    assert (await rig.server.app.timers.run_once()).paged == 1
    got = await rig.call(SERVICE + "GetHeartbeat", {"heartbeatId": "nightly-backup"}, "alice")
    assert got["heartbeat"]["state"] == "HEARTBEAT_STATE_PAGING"
    page = got["heartbeat"]["notificationId"]
    answer = await rig.beat("nightly-backup", who="oscar")  # the operator may beat too
    assert answer.json()["heartbeat"]["state"] == "HEARTBEAT_STATE_UP"
    found = await rig.call("/uns.v1.NotificationService/GetNotification", {"notificationId": page})
    assert found["notification"]["state"] == "NOTIFICATION_STATE_WITHDRAWN"
    assert found["notification"]["withdrawReason"] == "heartbeat resumed"
    listed = await rig.call(SERVICE + "ListHeartbeats", {}, "alice")
    assert [h["heartbeatId"] for h in listed["heartbeats"]] == ["nightly-backup"]


async def test_curl_without_a_valid_key_or_for_no_heartbeat_is_refused(rig: Rig) -> None:
    await rig.call(SERVICE + "PutHeartbeat", {"heartbeat": HEARTBEAT})
    for heartbeat_id, who, status, reason in (
        ("nightly-backup", None, 401, "UNAUTHENTICATED"),
        ("nightly-backup", "uns_not_a_key", 401, "UNAUTHENTICATED"),
        ("nightly-backup", "rita", 403, "PERMISSION_DENIED"),  # a responder
        ("weekly-report", "alice", 404, "NOT_FOUND"),
        ("Not An Id", "alice", 400, "INVALID_REQUEST"),
    ):
        answer = await rig.beat(heartbeat_id, who=who)
        assert answer.status_code == status, (heartbeat_id, who, answer.text)
        assert error_info(answer.json())["reason"] == reason
