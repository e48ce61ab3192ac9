"""What the console's pages say, read over HTTP by a signed-in operator on SQLite
(issue 42): an answer still owed, given, or never given reads as such, not
as a green DELIVERED; a dead letter's error names its provider's host and port."""

from __future__ import annotations

from datetime import timedelta

import httpx

from tests.console.conftest import ConsoleRig


def row(page: str, marker: str, end: str = "</tr>") -> str:
    return page.split(marker, 1)[1].split(end, 1)[0]


async def test_an_answer_owed_given_or_missed_reads_as_such(console: ConsoleRig) -> None:
    waiting = await console.send("owed", "ops.ack")
    dismissed = await console.send("answered", "ops.ack")
    plain = await console.send("no-answer-needed")
    assert await console.deliver() == 3
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        done = await http.post(
            console.url(f"/console/notifications/{dismissed}/dismiss"),
            data={"csrf": csrf, "reason": "false alarm", "confirm": "yes"},
        )
        assert done.status_code == 303
        listing = (await http.get(console.url("/console/notifications"))).text
        detail = (await http.get(console.url(f"/console/notifications/{waiting}"))).text

    def listed(nid: str) -> str:
        return row(listing, f'href="/console/notifications/{nid}"')

    assert "Waiting for an answer" in listed(waiting) and "s-waiting" in listed(waiting)
    assert "s-delivered" not in listed(waiting)
    assert 'title="state DELIVERED, ack_state PENDING"' in listed(waiting)  # the filter's words
    assert "Dismissed" in listed(dismissed) and "s-delivered" not in listed(dismissed)
    assert "DELIVERED" in listed(plain) and "s-delivered" in listed(plain)
    state = row(detail, 'id="state">', "</dd>")
    assert "Waiting for an answer" in state and "s-delivered" not in state
    assert "waiting for an answer" in row(detail, 'id="ack-state">', "</dd>")

    # Past the deadline the sweep times it out: not answered in time, in red.
    console.clock.offset += timedelta(minutes=31)
    assert (await console.server.app.timers.run_once()).timed_out == 1
    async with httpx.AsyncClient() as http:
        await console.sign_in(http)
        detail = (await http.get(console.url(f"/console/notifications/{waiting}"))).text
    state = row(detail, 'id="state">', "</dd>")
    assert "Not answered in time" in state and "s-failed" in state


async def test_a_dead_letter_names_its_providers_host_and_port(console: ConsoleRig) -> None:
    port = console.receiver.port
    await console.receiver.stop()  # nobody listens there now: connection refused
    nid = await console.send("nobody-home")
    assert await console.deliver() == 1
    endpoint = f"hook: connection refused to 127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        await console.sign_in(http)
        by_error = (await http.get(console.url("/console/dead-letters?by=error"))).text
        by_type = (await http.get(console.url("/console/dead-letters?by=type"))).text
        detail = (await http.get(console.url(f"/console/notifications/{nid}"))).text
    assert f'<span class="groupkey">{endpoint}</span>' in by_error
    assert endpoint in row(by_type, f'href="/console/notifications/{nid}"')
    assert endpoint in row(detail, "<dt>Error class</dt>", "</dd>")
    assert "N.N:N" not in by_error + by_type + detail
    # Where the channel's provider is, whatever its error says: on the dead letter, in
    # its attempts and in the triage's channel health.
    where = f"127.0.0.1:{port}"
    assert row(detail, 'id="providers">', "</dd>") == f"hook at {where}"
    assert where in row(detail, 'id="attempts">', "</table>")
    assert f"hook at {where}: 0% of 1 attempts" in row(
        by_type, f'href="/console/notifications/{nid}"'
    )
