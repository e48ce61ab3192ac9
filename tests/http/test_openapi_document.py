"""The served /openapi.json says what the server does (issue 42): the fields it calls
required are the ones the server refuses when missing, its examples are accepted, its
formats match the JSON the server writes (64-bit integers as strings, timestamps as
date-time), and WatchEvents is the Server-Sent Events operation the bridge serves.

Transport only, like tests/http/test_json_over_http.py: SQLite.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema_rs
import pytest

from tests.http.test_json_over_http import SEND, WATCH, Http, _sse, _start, alert, error_info
from tests.support.server import KEYS

DOCUMENT = Path(__file__).resolve().parents[2] / "uns_server" / "http" / "openapi.json"


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[Http]:
    server = await _start(tmp_path, watch_heartbeat_seconds=0.2, dispatch_enabled=False)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.app.http_port}") as session:
            yield Http(session)
    finally:
        await server.stop()


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DOCUMENT.read_text())
    return loaded


def conforms(document: dict[str, Any], schema: dict[str, Any], value: Any) -> list[str]:
    """The problems of ``value`` against ``schema`` (whose $refs point into the document)."""
    root = {**schema, "components": document["components"]}
    validator = jsonschema_rs.validator_for(root, validate_formats=True)
    return [f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(value)]


def snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), name)


def schema_of(document: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = document["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]
    return found


def violated_fields(body: dict[str, Any]) -> set[str]:
    return {
        v["field"]
        for d in body["details"]
        if d["type"] == "google.rpc.BadRequest"
        for v in d["debug"].get("fieldViolations", [])
    }


async def test_every_required_field_is_refused_when_missing(
    http: Http, document: dict[str, Any]
) -> None:
    checked = 0
    for path, item in document["paths"].items():
        if "post" not in item:
            continue
        content = item["post"]["requestBody"]["content"]["application/json"]
        request = schema_of(document, content["schema"])
        required = request.get("required", [])
        # Each required field absent, and each required message present but empty.
        body: dict[str, Any] = {}
        expected: set[str] = set()
        for name in required:
            field = request["properties"][name]
            if "$ref" in field and "properties" in schema_of(document, field):
                inner = schema_of(document, field).get("required", [])
                body[name] = {}
                expected |= {f"{snake(name)}.{snake(sub)}" for sub in inner}
            else:
                expected.add(snake(name))
        if not expected:
            continue
        status, answer, _ = await http.call(path, body, who="oscar")  # the operator
        if status == 403:  # a producer's call
            status, answer, _ = await http.call(path, body, who="alice")
        assert (status, error_info(answer)["reason"]) == (400, "INVALID_REQUEST"), (path, answer)
        assert expected <= violated_fields(answer), (path, answer)
        checked += len(expected)
    assert checked >= 25


# Optional messages whose own fields are required once they are given (each body is
# valid but for the empty message).
NESTED = [
    (
        "/uns.v1.PolicyService/PutPolicyRevision",
        "spec",
        {
            "notificationType": "a.b",
            "spec": {
                "channels": ["log"],
                "deliveryMode": "DELIVERY_MODE_GUARANTEED",
                "requireAck": True,
                "ackTimeoutMinutes": 30,
                "reminder": {},
                "quietHours": {},
                "escalation": [{"channels": ["log"]}],
            },
        },
        {"reminder": "Reminder", "quiet_hours": "QuietHours", "escalation[0]": "EscalationStep"},
    ),
    (
        "/uns.v1.RecipientService/PutRecipient",
        "recipient",
        {"recipient": {"recipientId": "a", "displayName": "A", "timeZone": "UTC"}},
        {"contacts[0]": "Contact", "quiet_hours": "QuietHours"},
    ),
    (
        "/uns.v1.RecipientService/PutRotation",
        "rotation",
        {
            "rotation": {
                "rotationId": "r",
                "members": ["a"],
                "startTime": "2026-01-01T00:00:00Z",
                "shift": "3600s",
                "timeZone": "UTC",
            }
        },
        {"overrides[0]": "RotationOverride"},
    ),
]


@pytest.mark.parametrize(("path", "owner", "body", "nested"), NESTED, ids=[n[0] for n in NESTED])
async def test_the_required_fields_of_nested_messages_are_refused_when_missing(
    http: Http,
    document: dict[str, Any],
    path: str,
    owner: str,
    body: dict[str, Any],
    nested: dict[str, str],
) -> None:
    body = copy.deepcopy(body)
    inner = body[owner]
    expected = set()
    for at, message in nested.items():
        name = at.split("[")[0]
        json_name = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
        inner[json_name] = [{**inner.get(json_name, [{}])[0]}] if "[" in at else {}
        required = schema_of(document, {"$ref": f"x/uns.v1.{message}"})["required"]
        expected |= {f"{owner}.{at}.{snake(field)}" for field in required}
    status, answer, _ = await http.call(path, body, who="oscar")
    assert (status, error_info(answer)["reason"]) == (400, "INVALID_REQUEST"), answer
    assert violated_fields(answer) == expected


async def test_every_example_is_accepted_and_answered_as_documented(
    http: Http, document: dict[str, Any]
) -> None:
    examples = 0
    for path, item in document["paths"].items():
        operation = item.get("post")
        if operation is None:
            continue
        content = operation["requestBody"]["content"]["application/json"]
        answer_schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
        for name, example in content.get("examples", {}).items():
            assert conforms(document, content["schema"], example["value"]) == [], (path, name)
            answers = [await http.call(path, example["value"], who=w) for w in ("alice", "oscar")]
            accepted = [body for status, body, _ in answers if status == 200]
            assert accepted, (path, name, answers)
            assert conforms(document, answer_schema, accepted[0]) == [], (path, accepted[0])
            examples += 1
    assert examples >= 8


async def test_watch_events_is_the_documented_event_stream(
    http: Http, document: dict[str, Any]
) -> None:
    operation = document["paths"][WATCH]["get"]
    assert "post" not in document["paths"][WATCH]
    stream = operation["responses"]["200"]["content"]["text/event-stream"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert parameters["Last-Event-ID"]["in"] == "header"
    assert parameters["afterSequence"]["schema"]["format"] == "int64"
    status, sent, _ = await http.call(SEND, alert(idempotencyKey="doc-1"))
    assert status == 200
    answer = {"$ref": "#/components/schemas/uns.v1.SendNotificationResponse"}
    assert conforms(document, answer, sent) == []
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {KEYS['alice']}"}
    # Every documented query parameter is one the bridge reads.
    query = "?replayHistory=true&kinds=EVENT_KIND_ACCEPTED&notificationType=demo.alert"
    query += f"&notificationIds={sent['notificationId']}&afterSequence=0"
    assert {"replayHistory", "kinds", "notificationType", "notificationIds", "afterSequence"} == {
        name for name, p in parameters.items() if p["in"] == "query"
    }
    async with http.session.get(WATCH + query, headers=headers) as response:
        assert (response.status, response.content_type) == (200, "text/event-stream")
        event, beat = await _sse(response, 2)
    assert (event["event"], beat["event"]) == ("event", "heartbeat")
    for frame in (event, beat):
        assert conforms(document, stream["x-event-data"], json.loads(frame["data"])) == []
    data = json.loads(event["data"])["event"]
    assert isinstance(data["sequence"], str) and data["sequence"] == event["id"]
    resume = {**headers, "Last-Event-ID": event["id"]}
    async with http.session.get(WATCH + query, headers=resume) as response:
        (after,) = await _sse(response, 1)
    assert after["event"] == "heartbeat"
