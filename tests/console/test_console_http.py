"""The console over plain HTTP: sign-in and sessions, CSRF, actions through the same
rules as gRPC (audited ``via: console``), bulk preview with validate_only, SSE."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from sqlalchemy import event

from tests.console.conftest import ConsoleRig, csrf_of
from tests.support.server import KEYS, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

# Sessions and expiry run on both dialects; the rest on SQLite (same code above the store).
SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


async def events_of(rig: ConsoleRig, nid: str) -> list[t.Event]:
    stream = rig.server.stub("oscar").WatchEvents(
        pb.WatchEventsRequest(notification_ids=[nid], replay_history=True), timeout=5
    )
    found = []
    async for response in stream:
        if response.HasField("heartbeat"):
            break
        found.append(response.event)
    stream.cancel()
    return found


async def test_sign_in_needs_an_operator_key_and_sets_a_strict_cookie(console: ConsoleRig) -> None:
    async with httpx.AsyncClient() as http:
        page = await http.get(console.url("/console/notifications"))
        assert page.status_code == 303
        assert page.headers["location"].startswith("/console/sign-in?next=")
        for key, status in (("uns_nope", 401), (KEYS["alice"], 403)):
            reply = await http.post(console.url("/console/sign-in"), data={"api_key": key})
            assert reply.status_code == status
            assert "uns_console" not in reply.cookies
        reply = await http.post(console.url("/console/sign-in"), data={"api_key": KEYS["oscar"]})
        assert reply.status_code == 303
        cookie = reply.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console/" in cookie
        assert "Secure" not in cookie  # plain HTTP on loopback; set under https
        home = await http.get(console.url("/console/"))
        assert home.status_code == 200
        csp = home.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "<script>" not in home.text and " style=" not in home.text
        # Sign-out ends the session on the server, not just in this browser.
        session = http.cookies["uns_console"]
        out = await http.post(console.url("/console/sign-out"), data={"csrf": csrf_of(home.text)})
        assert out.status_code == 303
    async with httpx.AsyncClient(cookies={"uns_console": session}) as stale:
        assert (await stale.get(console.url("/console/"))).status_code == 303


@SQLITE
async def test_a_post_without_the_csrf_token_or_from_elsewhere_is_refused(
    console: ConsoleRig,
) -> None:
    [nid] = await console.dead_letters("csrf", 1, "ops.hook")
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        url = console.url(f"/console/notifications/{nid}/replay")
        form = {"reason": "retry", "confirm": "yes"}
        assert (await http.post(url, data=form)).status_code == 403
        assert (await http.post(url, data={**form, "csrf": "wrong"})).status_code == 403
        evil = await http.post(
            url, data={**form, "csrf": csrf}, headers={"Origin": "https://evil.example"}
        )
        assert evil.status_code == 403
        assert (await console.get(nid)).state == t.NOTIFICATION_STATE_FAILED
        ok = await http.post(url, data={**form, "csrf": csrf}, headers={"Origin": console.base_url})
        assert ok.status_code == 303
    assert (await console.get(nid)).state == t.NOTIFICATION_STATE_PENDING
    replay = [e for e in await events_of(console, nid) if e.kind == t.EVENT_KIND_REPLAY_REQUESTED]
    payload = json_format.MessageToDict(replay[0].payload)
    assert (payload["actor"], payload["via"], payload["reason"]) == ("oscar", "console", "retry")


async def test_an_expired_session_is_refused(console: ConsoleRig) -> None:
    [nid] = await console.dead_letters("expiry", 1, "ops.hook")
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        console.clock.advance(minutes=31)  # idle expiry is 30 minutes
        page = await http.get(console.url(f"/console/notifications/{nid}"))
        assert page.status_code == 303 and "/console/sign-in" in page.headers["location"]
        refused = await http.post(
            console.url(f"/console/notifications/{nid}/resolve"),
            data={"csrf": csrf, "reason": "done", "confirm": "yes"},
        )
        assert refused.status_code == 403
        assert "session has ended" in refused.text
    assert (await console.get(nid)).dead_letter


@SQLITE
async def test_the_absolute_expiry_ends_even_a_busy_session(console: ConsoleRig) -> None:
    async with httpx.AsyncClient() as http:
        await console.sign_in(http)
        served = 0
        while (await http.get(console.url("/console/keys"))).status_code == 200:
            served += 1
            assert served < 100, "the session outlived its absolute expiry"
            console.clock.advance(minutes=25)  # never idle for 30 minutes
        # 12 hours after sign-in, to the request: 28 pages 25 minutes apart.
        assert served == 12 * 60 // 25 + 1


@SQLITE
async def test_a_reason_and_a_confirmation_are_required(console: ConsoleRig) -> None:
    [nid] = await console.dead_letters("reason", 1, "ops.hook")
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        url = console.url(f"/console/notifications/{nid}/resolve")
        assert (await http.post(url, data={"csrf": csrf, "confirm": "yes"})).status_code == 400
        assert (await http.post(url, data={"csrf": csrf, "reason": "x"})).status_code == 400
        assert (await console.get(nid)).dead_letter
        done = await http.post(
            url, data={"csrf": csrf, "reason": "fixed by hand", "confirm": "yes"}
        )
        assert done.status_code == 303
        again = await http.post(url, data={"csrf": csrf, "reason": "twice", "confirm": "yes"})
        assert again.status_code == 409 and "NOT_DEAD_LETTERED" in again.text
    n = await console.get(nid)
    assert n.state == t.NOTIFICATION_STATE_FAILED and not n.dead_letter


@SQLITE
async def test_bulk_preview_says_what_would_be_refused_and_changes_nothing(
    console: ConsoleRig,
) -> None:
    dead = await console.dead_letters("bulk", 2, "ops.batch")
    delivered = await console.send("fine", "ops.hook")
    await console.deliver()
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        triage = await http.get(console.url("/console/dead-letters?by=type"))
        assert "ops.batch" in triage.text and dead[0] in triage.text
        by_error = await http.get(console.url("/console/dead-letters?by=error"))
        assert "hook: " in by_error.text or "HTTP N" in by_error.text
        preview = await http.post(
            console.url("/console/dead-letters/preview"),
            data={"csrf": csrf, "op": "replay", "id": [*dead, delivered]},
        )
        assert preview.status_code == 200
        assert "<strong>2</strong> would be replayed" in preview.text
        assert "<strong>1</strong> would be refused" in preview.text
        assert "NOT_DEAD_LETTERED" in preview.text
        for nid in dead:
            assert (await console.get(nid)).state == t.NOTIFICATION_STATE_FAILED
        group = await http.post(
            console.url("/console/dead-letters/preview"),
            data={
                "csrf": csrf,
                "bucket": "needs-action",
                "by": "type",
                "group_resolve": "ops.batch",
            },
        )
        assert "<strong>2</strong> would be resolved" in group.text
        applied = await http.post(
            console.url("/console/dead-letters/apply"),
            data={
                "csrf": csrf,
                "op": "resolve",
                "id": previewed_ids(group.text),
                "reason": "known",
                "confirm": "yes",
            },
        )
        assert applied.status_code == 200 and "<strong>2</strong> done" in applied.text
    for nid in dead:
        assert not (await console.get(nid)).dead_letter


def previewed_ids(page: str) -> list[str]:
    """The ids a preview page would apply (its hidden inputs)."""
    return re.findall(r'<input type="hidden" name="id" value="([^"]+)">', page)


async def test_the_event_stream_pushes_new_events(console: ConsoleRig) -> None:
    [nid] = await console.dead_letters("sse", 1, "ops.hook")
    async with httpx.AsyncClient(timeout=10) as http:
        csrf = await console.sign_in(http)
        async with http.stream("GET", console.url(f"/console/events?notification_id={nid}")) as s:
            assert s.headers["content-type"].startswith("text/event-stream")
            lines = s.aiter_lines()

            async def next_event() -> dict[str, object]:
                async for line in lines:
                    if line.startswith("data: "):
                        return dict(json.loads(line[6:]))
                raise AssertionError("stream ended")

            replay = await http.post(
                console.url(f"/console/notifications/{nid}/replay"),
                data={"csrf": csrf, "reason": "again", "confirm": "yes"},
            )
            assert replay.status_code == 303
            event = await asyncio.wait_for(next_event(), 5)
            assert (event["kind"], event["notification_id"]) == ("REPLAY_REQUESTED", nid)
            assert "via console" in str(event["summary"])


@SQLITE
async def test_signing_out_ends_the_open_event_streams_of_the_session(console: ConsoleRig) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        csrf = await console.sign_in(http)
        async with http.stream("GET", console.url("/console/events")) as s:
            out = await http.post(console.url("/console/sign-out"), data={"csrf": csrf})
            assert out.status_code == 303
            console.clock.advance(seconds=6)  # the stream re-checks its session every 5 s

            async def drained() -> None:
                async for _ in s.aiter_lines():
                    pass

            await asyncio.wait_for(drained(), 5)  # the server closed it
        again = await http.get(console.url("/console/events"))
        assert again.status_code == 303  # the reconnect is sent to sign in


@SQLITE
async def test_unknown_keys_at_sign_in_spend_the_addresss_lookup_budget(
    db_url: str, tmp_path: Path
) -> None:
    """Guessing keys at the console costs what it costs over gRPC: past the client
    address's budget of failed lookups, sign-in is refused (429) before the database is
    asked, and the refusal carries no session; another address keeps its own budget."""
    server = await start_server(
        db_url,
        tmp_path,
        http_listen="127.0.0.1:0",
        auth_failures_per_second=0.01,
        auth_failure_burst=2,
    )
    try:
        async with httpx.AsyncClient() as http:
            url = server.app.public_url + "/console/sign-in"
            codes = [
                (await http.post(url, data={"api_key": f"uns_guess{i}"})).status_code
                for i in range(3)
            ]
            assert codes == [401, 401, 429]
            assert "uns_console" not in http.cookies
        # Another client address has a budget of its own.
        other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(transport=other) as http:
            url = url.replace("localhost", "127.0.0.1")
            reply = await http.post(url, data={"api_key": "uns_guess_elsewhere"})
            assert reply.status_code == 401
    finally:
        await server.stop()


@SQLITE
async def test_signing_in_again_replaces_the_browsers_session(console: ConsoleRig) -> None:
    async with httpx.AsyncClient() as http:
        await console.sign_in(http)
        first = http.cookies["uns_console"]
        await console.sign_in(http)
        assert http.cookies["uns_console"] != first
    async with httpx.AsyncClient(cookies={"uns_console": first}) as old:
        assert (await old.get(console.url("/console/"))).status_code == 303


@SQLITE
@pytest.mark.parametrize("http_request_timeout", [2.0])
async def test_an_event_stream_outlives_the_request_timeout_on_heartbeats(
    console: ConsoleRig,
) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        await console.sign_in(http)
        heartbeats = 0
        async with http.stream("GET", console.url("/console/events")) as s:
            async for line in s.aiter_lines():
                heartbeats += line.startswith(": heartbeat")
                if heartbeats == 4:  # one a second, past the 2-second request timeout
                    break
        assert heartbeats == 4


@SQLITE
async def test_the_list_filters_pages_and_explains_a_bad_filter(console: ConsoleRig) -> None:
    [dead] = await console.dead_letters("list-dead", 1, "ops.batch")
    ids = [await console.send(f"list-{i}", "ops.hook", title=f"Item {i}") for i in range(3)]
    async with httpx.AsyncClient() as http:
        await console.sign_in(http)
        url = console.url("/console/notifications")
        first = await http.get(url, params={"filter": "state = PENDING", "page_size": "2"})
        assert first.status_code == 200
        assert f"/console/notifications/{ids[2]}" in first.text  # newest first
        assert f"/console/notifications/{ids[0]}" not in first.text
        assert dead not in first.text
        nxt = re.search(r'href="([^"]+)" rel="next"', first.text)
        assert nxt
        second = await http.get(console.base_url + nxt.group(1).replace("&amp;", "&"))
        assert f"/console/notifications/{ids[0]}" in second.text
        assert 'rel="next"' not in second.text
        quick = await http.get(url, params={"filter": "state = FAILED AND dead_letter = true"})
        assert dead in quick.text and ids[0] not in quick.text
        bad = await http.get(url, params={"filter": "status = FAILED"})
        assert bad.status_code == 400
        assert "the API calls it `state`" in bad.text.replace("&#96;", "`")
        empty = await http.get(url, params={"filter": 'notification_type = "nope"'})
        assert "No notifications match this filter." in empty.text


@SQLITE
async def test_an_idle_console_costs_no_queries_but_its_heartbeat(console: ConsoleRig) -> None:
    """While nothing happens, open consoles send heartbeats and run no query of their
    own: whatever SQL runs is the process-wide event hub's shared safety-net read."""
    db = console.server.app.db
    engines = {db.writer.sync_engine, db.reader.sync_engine}
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    async with httpx.AsyncClient(timeout=10) as http:
        await console.sign_in(http)
        async with (
            http.stream("GET", console.url("/console/events")) as overview,
            http.stream("GET", console.url("/console/events")) as tail,
        ):
            streams = [overview.aiter_lines(), tail.aiter_lines()]

            async def heartbeat(lines: AsyncIterator[str]) -> None:
                async for line in lines:
                    if line.startswith(": heartbeat"):
                        return

            for lines in streams:  # both positioned: their catch-up is done
                await asyncio.wait_for(heartbeat(lines), 5)
            for engine in engines:
                event.listen(engine, "before_cursor_execute", record)
            try:
                for _ in range(3):  # three more heartbeats on each, ~3 s of idling
                    for lines in streams:
                        await asyncio.wait_for(heartbeat(lines), 5)
            finally:
                for engine in engines:
                    event.remove(engine, "before_cursor_execute", record)
    assert all("FROM uns_events" in s and "uns_notifications" not in s for s in statements), (
        statements
    )


@SQLITE
async def test_the_overview_counts_states_and_shows_channel_health(console: ConsoleRig) -> None:
    await console.dead_letters("overview", 2, "ops.batch")
    await console.send("waiting", "ops.ack")
    await console.deliver()  # delivered, its ack now pending (30 minutes)
    await console.send("queued", "ops.hook")  # due, not dispatched
    async with httpx.AsyncClient() as http:
        await console.sign_in(http)
        answer = await http.get(console.url("/console/"))
        page = answer.text
    # the handler's own time, for dev tools and the bench's console workload
    assert re.fullmatch(r"app;dur=\d+\.\d", answer.headers["Server-Timing"])
    cards = dict(
        (label, int(n))
        for n, label in re.findall(
            r'<span class="n">(\d+)</span>\s*<span class="label">([^<]+)</span>', page
        )
    )
    assert cards == {
        "Due now": 1,
        "In flight": 0,
        "Scheduled (retry later)": 0,
        "Delivered (24 h)": 1,
        "Failed, needs action": 2,
        "Failed, resolved": 0,
        "Acks pending": 1,
        "Acks due within the hour": 1,
    }
    health = page[page.index('id="channels"') :]
    where = f"127.0.0.1:{console.receiver.port}"  # the provider's host and port
    assert f'hook <small class="muted endpoint">{where}</small></th><td>3</td><td>33%</td>' in (
        health
    )
    assert "HTTP 400: bad request" in health
    assert page.count("<svg") == 2


@SQLITE
async def test_the_queue_counts_are_lower_bounds_past_their_cap(console: ConsoleRig) -> None:
    for n in range(3):
        await console.send(f"queued-{n}")  # due, not dispatched
    async with console.server.app.store.read() as tx:
        capped = await tx.console.queue_counts(console.clock(), 2)
        exact = await tx.console.queue_counts(console.clock(), 10)
    assert capped == ({"due": 3, "in_flight": 0, "scheduled": 0}, True)  # read 3 of 3: "3+"
    assert exact == ({"due": 3, "in_flight": 0, "scheduled": 0}, False)


@pytest.mark.parametrize("ending", ["sign-out", "idle expiry"])
async def test_a_busy_event_stream_ends_when_its_session_ends(
    console: ConsoleRig, ending: str
) -> None:
    """Events arriving faster than heartbeats do not keep a dead session's stream open:
    the session is re-checked on time, before whatever the stream writes next."""
    stop = asyncio.Event()

    async def busy() -> None:
        i = 0
        while not stop.is_set():
            await console.send(f"busy-{ending}-{i}")
            i += 1

    async with httpx.AsyncClient(timeout=30) as http:
        csrf = await console.sign_in(http)
        async with http.stream("GET", console.url("/console/events")) as s:
            lines = s.aiter_lines()
            producer = asyncio.create_task(busy())
            try:
                async for line in lines:  # the stream is flowing
                    if line.startswith("data: "):
                        break
                if ending == "sign-out":
                    out = await http.post(console.url("/console/sign-out"), data={"csrf": csrf})
                    assert out.status_code == 303
                    console.clock.advance(seconds=6)
                else:
                    console.clock.advance(minutes=31)  # past console_session_idle_minutes

                async def drained() -> int:
                    return sum([line.startswith("data: ") async for line in lines])

                await asyncio.wait_for(drained(), 30)  # the server closed it
            finally:
                stop.set()
                await producer
