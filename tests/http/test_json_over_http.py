"""JSON over HTTP (SPEC §6): the Connect protocol's unary JSON shape on the HTTP listener,
answered by the gRPC methods themselves, and WatchEvents as Server-Sent Events.

The bridge is transport only (the services behind it run on both dialects elsewhere), so
these tests use SQLite.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.server import KEYS, RunningServer, start_server
from uns.v1 import notification_service_pb2 as pb
from uns_server.http.connect import methods
from uns_server.store import migrate
from uns_server.store.db import Database

SEND = "/uns.v1.NotificationService/SendNotification"
GET = "/uns.v1.NotificationService/GetNotification"
ACK = "/uns.v1.NotificationService/Acknowledge"
WATCH = "/uns.v1.NotificationService/WatchEvents"
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


def alert(**fields: Any) -> dict[str, Any]:
    return {
        "notificationType": "demo.alert",
        "intent": "NOTIFICATION_INTENT_WARNING",
        "title": "Disk almost full",
        "message": "92% used on db-1",
        "source": "curl",
        **fields,
    }


async def _start(tmp_path: Path, **overrides: Any) -> RunningServer:
    url = f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}"
    db = Database(url)
    await migrate.upgrade(db)
    await db.dispose()
    return await start_server(url, tmp_path, http_listen="127.0.0.1:0", **overrides)


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[Http]:
    server = await _start(tmp_path, dispatch_enabled=False)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.app.http_port}") as session:
            yield Http(session)
    finally:
        await server.stop()


class Http:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def call(
        self, path: str, body: Any, who: str | None = "alice", **headers: str
    ) -> tuple[int, Any, dict[str, str]]:
        all_headers = {"Content-Type": "application/json", **headers}
        if who is not None:
            all_headers["Authorization"] = f"Bearer {KEYS.get(who, who)}"
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with self.session.post(path, data=data, headers=all_headers) as response:
            return response.status, await response.json(), dict(response.headers)


def error_info(body: dict[str, Any]) -> dict[str, Any]:
    """The ErrorInfo of a Connect error, from its debug JSON and from its bytes."""
    from google.rpc import error_details_pb2

    infos = [d for d in body["details"] if d["type"] == "google.rpc.ErrorInfo"]
    assert len(infos) == 1, body
    value = infos[0]["value"]
    decoded = error_details_pb2.ErrorInfo.FromString(
        base64.b64decode(value + "=" * (-len(value) % 4))
    )
    assert decoded.reason == infos[0]["debug"]["reason"]
    assert decoded.domain == "uns.v1"
    debug: dict[str, Any] = infos[0]["debug"]
    return debug


async def test_send_is_the_grpc_method_with_its_idempotency(http: Http) -> None:
    status, sent, _ = await http.call(SEND, alert(idempotencyKey="k-1"))
    assert status == 200, sent
    assert sent["state"] == "NOTIFICATION_STATE_PENDING"
    status, replay, _ = await http.call(SEND, alert(idempotencyKey="k-1"))
    assert (status, replay["notificationId"], replay["idempotentReplay"]) == (
        200,
        sent["notificationId"],
        True,
    )
    status, conflict, _ = await http.call(SEND, alert(idempotencyKey="k-1", title="other"))
    assert (status, conflict["code"]) == (409, "already_exists")
    info = error_info(conflict)
    assert info["reason"] == "IDEMPOTENCY_CONFLICT"
    assert info["metadata"]["notification_id"] == sent["notificationId"]
    # Binary protobuf too (Connect's application/proto).
    request = pb.SendNotificationRequest(
        notification_type="demo.alert", intent=2, title="t", message="m", source="proto"
    )
    async with http.session.post(
        SEND,
        data=request.SerializeToString(),
        headers={"Content-Type": "application/proto", "Authorization": f"Bearer {KEYS['bob']}"},
    ) as response:
        assert response.status == 200
        assert pb.SendNotificationResponse.FromString(await response.read()).notification_id


async def test_tenancy_roles_and_refusals_are_grpcs(http: Http) -> None:
    _, sent, _ = await http.call(SEND, alert())
    nid = sent["notificationId"]
    status, got, _ = await http.call(GET, {"notificationId": nid})
    assert status == 200 and got["notification"]["id"] == nid
    # Another producer does not see it: NOT_FOUND, exactly like an unknown id.
    for who, notification_id in (("bob", nid), ("alice", UNKNOWN_ID)):
        status, body, _ = await http.call(GET, {"notificationId": notification_id}, who)
        assert (status, body["code"], error_info(body)["reason"]) == (404, "not_found", "NOT_FOUND")
    status, body, _ = await http.call(GET, {"notificationId": nid}, who="nobody")
    assert (status, error_info(body)["reason"]) == (401, "UNAUTHENTICATED")
    status, body, _ = await http.call(GET, {"notificationId": nid}, who=None)
    assert (status, error_info(body)["reason"]) == (401, "UNAUTHENTICATED")
    status, body, _ = await http.call("/uns.v1.KeyService/ListApiKeys", {})
    assert (status, error_info(body)["reason"]) == (403, "PERMISSION_DENIED")
    # Not delivered yet (dispatch is off): FAILED_PRECONDITION is 412.
    status, body, _ = await http.call(ACK, {"notificationId": nid}, who="rita")
    assert (status, body["code"]) == (412, "failed_precondition")
    assert error_info(body)["reason"] == "ACK_NOT_PENDING"
    # Validation: the service's own BadRequest, with its field path.
    status, body, _ = await http.call(SEND, alert(title=""))
    assert (status, error_info(body)["reason"]) == (400, "INVALID_REQUEST")
    bad = [d for d in body["details"] if d["type"] == "google.rpc.BadRequest"]
    assert bad and bad[0]["debug"]["fieldViolations"][0]["field"] == "title"


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"{", "application/json", 400),  # malformed JSON
        (b"[1, 2]", "application/json", 400),  # not an object
        (json.dumps(alert(noSuchField=1)).encode(), "application/json", 400),  # unknown field
        (json.dumps(alert(intent="NO_SUCH_INTENT")).encode(), "application/json", 400),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 400),  # nesting
        # Parsed off the event loop (over 64 KiB), then refused by the service's limit.
        (
            json.dumps(alert(metadata={f"k{i}": "v" * 100 for i in range(2000)})).encode(),
            "application/json",
            400,
        ),
        (b"\xff\xfe", "application/proto", 400),  # not a message
        (json.dumps(alert()).encode(), "text/plain", 415),
        (json.dumps(alert()).encode(), "", 415),
        (b" " * (5 * 1024 * 1024), "application/json", 413),  # over the message limit
    ],
)
async def test_what_the_bridge_refuses_is_4xx_with_error_info(
    http: Http, body: bytes, content_type: str, status: int
) -> None:
    got, answer, _ = await http.call(SEND, body, **{"Content-Type": content_type})
    assert got == status, answer
    assert error_info(answer)["reason"] == "INVALID_REQUEST"


async def test_wrong_methods_and_unknown_rpcs_are_json_refusals(http: Http) -> None:
    async with http.session.get(SEND) as response:
        assert (response.status, response.headers["Allow"]) == (405, "POST")
        assert error_info(await response.json())["reason"] == "INVALID_REQUEST"
    async with http.session.post(WATCH, data=b"{}") as response:
        assert (response.status, response.headers["Allow"]) == (405, "GET")
    status, body, _ = await http.call("/uns.v1.NotificationService/NoSuchMethod", {})
    assert (status, body["code"], error_info(body)["reason"]) == (
        404,
        "unimplemented",
        "UNIMPLEMENTED",
    )


async def test_every_unary_method_of_every_service_is_routed(http: Http) -> None:
    unary = [m for m in methods() if not m.server_streaming]
    services = {m.path.split("/")[1] for m in unary}
    assert {"uns.v1.NotificationService", "uns.v1.KeyService", "uns.v1.PolicyService"} <= services
    for method in unary:
        status, body, _ = await http.call(method.path, {}, who="nobody")
        assert (status, error_info(body)["reason"]) == (401, "UNAUTHENTICATED"), method.path
    async with http.session.get("/openapi.json") as response:
        document = await response.json(content_type=None)
    posts = {p for p, item in document["paths"].items() if "post" in item}
    # Besides the methods: the routes that are not (scripts/openapi_integrations.py).
    others = {"/integrations/alertmanager", "/heartbeats/{heartbeat_id}"}
    assert posts == {m.path for m in unary} | others
    streaming = {m.path for m in methods() if m.server_streaming}
    assert {p for p, item in document["paths"].items() if "get" in item} == streaming == {WATCH}


async def test_rate_limited_is_429_with_retry_info(tmp_path: Path) -> None:
    server = await _start(tmp_path, rate_limit_per_second=0.01, rate_limit_burst=1)
    try:
        base = f"http://127.0.0.1:{server.app.http_port}"
        async with aiohttp.ClientSession(base) as session:
            http = Http(session)
            first, _, _ = await http.call(SEND, alert())
            assert first == 200
            status, body, headers = await http.call(SEND, alert())
            assert (status, body["code"]) == (429, "resource_exhausted")
            assert error_info(body)["reason"] == "RATE_LIMITED"
            assert [d for d in body["details"] if d["type"] == "google.rpc.RetryInfo"]
            assert int(headers["Retry-After"]) >= 1
    finally:
        await server.stop()


async def test_a_slow_body_is_408_and_holds_nothing(tmp_path: Path) -> None:
    server = await _start(tmp_path, http_request_timeout_seconds=1.0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.app.http_port)
        writer.write(
            f"POST {SEND} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\n\r\n{".encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), head
        length = int(re.search(rb"Content-Length: (\d+)", head, re.I)[1])  # type: ignore[index]
        body = json.loads(await reader.readexactly(length))
        assert body["code"] == "deadline_exceeded", body  # a Connect error its client parses
        assert error_info(body)["reason"] == "DEADLINE_EXCEEDED"
        writer.close()
    finally:
        await server.stop()


async def _sse(response: aiohttp.ClientResponse, count: int) -> list[dict[str, str]]:
    """The first ``count`` Server-Sent Events of a stream, as field dicts."""
    events: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if not line:
            events.append(fields)
            fields = {}
            if len(events) == count:
                return events
            continue
        name, _, value = line.partition(": ")
        fields[name] = value
    return events


async def test_watch_events_is_server_sent_events_resumable_by_last_event_id(
    tmp_path: Path,
) -> None:
    server = await _start(tmp_path, watch_heartbeat_seconds=0.2, dispatch_enabled=False)
    try:
        base = f"http://127.0.0.1:{server.app.http_port}"
        async with aiohttp.ClientSession(base) as session:
            http = Http(session)
            ids = [(await http.call(SEND, alert()))[1]["notificationId"] for _ in range(2)]
            headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {KEYS['alice']}"}
            query = "?replayHistory=true&kinds=EVENT_KIND_ACCEPTED"
            async with session.get(WATCH + query, headers=headers) as response:
                assert response.status == 200
                assert response.content_type == "text/event-stream"
                first, second = await _sse(response, 2)
            assert [first["event"], second["event"]] == ["event", "event"]
            events = [json.loads(e["data"])["event"] for e in (first, second)]
            assert [e["notificationId"] for e in events] == ids
            assert [e["sequence"] for e in events] == [first["id"], second["id"]]
            # Resuming after the first event gives the second, then heartbeats.
            resume = {**headers, "Last-Event-ID": first["id"]}
            async with session.get(WATCH + query, headers=resume) as response:
                again, beat = await _sse(response, 2)
            assert json.loads(again["data"])["event"]["notificationId"] == ids[1]
            assert beat["event"] == "heartbeat" and int(beat["id"]) >= int(second["id"])
            # Refusals before the stream starts are ordinary JSON errors.
            async with session.get(WATCH, headers={"Accept": "text/event-stream"}) as response:
                assert response.status == 401
                assert error_info(await response.json())["reason"] == "UNAUTHENTICATED"
            async with session.get(WATCH + "?afterSequence=-1", headers=headers) as response:
                assert response.status == 400
            async with session.get(WATCH + "?nope=1", headers=headers) as response:
                assert response.status == 400
    finally:
        await server.stop()


async def test_failed_lookups_are_charged_to_the_http_clients_address(tmp_path: Path) -> None:
    """The bridge's calls all come from one unix socket; the budget of unknown-key
    lookups is still per HTTP client: one client spending it refuses only itself."""
    server = await _start(tmp_path, auth_failures_per_second=0.01, auth_failure_burst=2)
    base = f"http://127.0.0.1:{server.app.http_port}"
    try:
        async with aiohttp.ClientSession(base) as session:
            statuses = [(await Http(session).call(GET, {}, who=f"bad-{i}"))[0] for i in range(3)]
            assert statuses == [401, 401, 429]
        other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with aiohttp.ClientSession(base, connector=other) as session:
            status, body, _ = await Http(session).call(GET, {}, who="bad-other")
            assert (status, error_info(body)["reason"]) == (401, "UNAUTHENTICATED")
    finally:
        await server.stop()


async def test_a_server_shutting_down_ends_the_stream_with_a_resumable_error(
    tmp_path: Path,
) -> None:
    server = await _start(tmp_path, dispatch_enabled=False)
    stopping: asyncio.Task[None] | None = None
    try:
        base = f"http://127.0.0.1:{server.app.http_port}"
        async with aiohttp.ClientSession(base) as session:
            headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {KEYS['alice']}"}
            async with session.get(WATCH, headers=headers) as response:
                (beat,) = await _sse(response, 1)
                assert beat["event"] == "heartbeat"
                stopping = asyncio.create_task(server.stop())
                (error,) = await _sse(response, 1)
            assert error["event"] == "error"
            body = json.loads(error["data"])
            assert body["code"] == "unavailable"
            assert error_info(body)["reason"] == "SHUTTING_DOWN"
    finally:
        if stopping is None:
            await server.stop()
        else:
            await stopping


async def test_behind_tls_and_mtls_the_bridge_still_reaches_grpc(tmp_path: Path) -> None:
    """The public gRPC port demands a client certificate; the bridge's private socket
    does not, and the HTTP client authenticates with its key as everywhere on HTTP."""
    import ssl

    from tests.support.certs import TestCA

    ca = TestCA(tmp_path)
    issued = ca.issue("server", "localhost", server=True)
    server = await _start(
        tmp_path,
        tls_cert_file=str(issued.cert),
        tls_key_file=str(issued.key),
        tls_client_ca_file=str(ca.cert),
    )
    try:
        verify = ssl.create_default_context(cafile=str(ca.cert))
        base = f"https://localhost:{server.app.http_port}"
        connector = aiohttp.TCPConnector(ssl=verify)
        async with aiohttp.ClientSession(base, connector=connector) as session:
            status, sent, _ = await Http(session).call(SEND, alert())
            assert status == 200, sent
            status, body, _ = await Http(session).call(SEND, alert(), who="nobody")
            assert (status, error_info(body)["reason"]) == (401, "UNAUTHENTICATED")
    finally:
        await server.stop()


async def test_whole_numbers_stay_integers_in_answers_and_events(tmp_path: Path) -> None:
    """A Struct holds every number as a double; over JSON a whole one is written as an
    integer (Go's decoder refuses ``1.0`` for an int), other numbers as they are."""
    server = await _start(tmp_path, watch_heartbeat_seconds=0.2, dispatch_enabled=False)
    metadata = {"attempt": 1, "lag_seconds": 92, "ratio": 2.5, "nested": {"counts": [3, -4, 0.5]}}
    try:
        base = f"http://127.0.0.1:{server.app.http_port}"
        async with aiohttp.ClientSession(base) as session:
            http = Http(session)
            _, sent, _ = await http.call(SEND, alert(metadata=metadata))
            nid = sent["notificationId"]
            headers = {"Authorization": f"Bearer {KEYS['alice']}"}
            async with session.post(GET, json={"notificationId": nid}, headers=headers) as response:
                text = await response.text()
            assert '"attempt": 1,' in text or '"attempt": 1}' in text, text
            got = json.loads(text)["notification"]["metadata"]
            assert got == metadata
            assert [type(got[k]) for k in ("attempt", "lag_seconds", "ratio")] == [int, int, float]
            assert [type(n) for n in got["nested"]["counts"]] == [int, int, float]
            watch = {**headers, "Accept": "text/event-stream"}
            query = "?replayHistory=true&kinds=EVENT_KIND_ACCEPTED"
            async with session.get(WATCH + query, headers=watch) as response:
                (accepted,) = await _sse(response, 1)
            effective = json.loads(accepted["data"])["event"]["payload"]["effective"]
            assert (effective["max_attempts"], type(effective["max_attempts"])) == (5, int)
            assert ".0," not in accepted["data"], accepted["data"]
    finally:
        await server.stop()


async def test_a_client_closing_its_event_stream_is_one_info_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every subscriber ends its stream by closing it: no ERROR, no traceback."""
    caplog.set_level(logging.DEBUG)
    server = await _start(tmp_path, watch_heartbeat_seconds=0.1, dispatch_enabled=False)
    try:
        base = f"http://127.0.0.1:{server.app.http_port}"
        headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {KEYS['alice']}"}
        async with (
            aiohttp.ClientSession(base) as session,
            session.get(WATCH, headers=headers) as response,
        ):
            (beat,) = await _sse(response, 1)
            assert beat["event"] == "heartbeat"
            assert server.app.watch.open_total == 1
        # The bridge notices at its next write and cancels the gRPC stream, which closes.
        deadline = asyncio.get_running_loop().time() + 30
        while server.app.watch.open_total:
            assert asyncio.get_running_loop().time() < deadline, "the stream stayed open"
            await asyncio.sleep(0.05)
        closed = [
            r for r in caplog.records if r.getMessage() == "event stream closed by the client"
        ]
        assert [r.levelno for r in closed] == [logging.INFO]
        loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
        assert loud == [], [(r.name, r.getMessage()) for r in loud]
    finally:
        await server.stop()
