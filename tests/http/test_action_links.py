"""Signed action links: every message that needs an answer carries them; GET shows,
POST answers as the link's recipient through the same decision as Acknowledge."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration

from tests.http.conftest import LINK_KEY, Rig
from tests.http.helpers import click, email_links, form_nonce
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.links import LinkClaims

RECIPIENT = "email:oncall@example.com"


async def test_every_channel_carries_acknowledge_and_dismiss_links(rig: Rig) -> None:
    await rig.send("links-all")
    await rig.send("links-none", notification_type="ops.info")
    assert await rig.deliver() == 2
    base = rig.base_url + "/a/"

    answered, informational = sorted(rig.smtp.messages, key=lambda m: "X-UNS-Acknowledge-URL" in m)[
        ::-1
    ]
    links = email_links(answered)
    assert links["Acknowledge"].startswith(base) and links["Dismiss"].startswith(base)
    assert answered["X-UNS-Acknowledge-URL"] == links["Acknowledge"]
    assert answered["X-UNS-Dismiss-URL"] == links["Dismiss"]
    assert informational["X-UNS-Acknowledge-URL"] is None and not email_links(informational)

    [posted] = rig.fakes.slack("chat.postMessage")
    buttons = {e["action_id"]: e for e in posted["blocks"][1]["elements"]}
    assert set(buttons) == {"uns_ack", "uns_dismiss", "uns_snooze"}
    assert all("url" not in b and b["value"] for b in buttons.values())  # interactive

    [hook] = rig.fakes.calls("/hook")
    hook_links = hook.json()["data"]["links"]
    assert hook_links["acknowledge"].startswith(base) and hook_links["dismiss"].startswith(base)

    [event] = rig.fakes.pagerduty_events()
    assert [link["text"] for link in event["links"]] == ["Acknowledge in UNS", "Dismiss in UNS"]
    assert all(link["href"].startswith(base) for link in event["links"])

    # Each link names its own recipient.
    service = rig.server.app.links
    assert service is not None
    recipients = {
        (await service.verify(url.rpartition("/")[2])).recipient  # type: ignore[union-attr]
        for url in (links["Acknowledge"], hook_links["acknowledge"], event["links"][0]["href"])
    }
    assert recipients == {RECIPIENT, "webhook:hook", "pagerduty:pager"}


async def test_get_changes_nothing_post_answers_as_the_recipient(rig: Rig) -> None:
    nid = await rig.send("links-ack", notification_type="ops.mail")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Acknowledge"]
    async with httpx.AsyncClient() as http:
        for _ in range(3):  # scanners and previews fetch links: nothing happens
            page = await http.get(url)
            assert page.status_code == 200
        assert "Disk almost full" in page.text and 'id="ack"' in page.text
        assert 'id="dismiss"' not in page.text  # this link's action set is "ack" only
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING

        answered = await click(http, url, "ack")
        assert answered.status_code == 303 and answered.headers["location"] == httpx.URL(url).path
        after = await http.get(url)
        assert f"Acknowledged by {RECIPIENT} at " in after.text
        assert 'id="ack"' not in after.text
        again = await http.post(url, data={"action": "ack", "nonce": form_nonce(page.text)})
        assert again.status_code == 303  # the same recipient again: idempotent

    notification = await rig.get(nid)
    assert notification.ack_state == t.ACK_STATE_ACKED
    assert notification.ack_actor == RECIPIENT
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.via) == (RECIPIENT, "link")
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: any(e.kind == t.EVENT_KIND_ACKED for e in evs),
    )
    acked = [json_format.MessageToDict(e.payload) for e in events if e.kind == t.EVENT_KIND_ACKED]
    assert acked == [{"actor": RECIPIENT, "via": "link", "metadata": {}}]


async def test_dismiss_link_dismisses(rig: Rig) -> None:
    nid = await rig.send("links-dismiss", notification_type="ops.mail")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Dismiss"]
    async with httpx.AsyncClient() as http:
        assert (await click(http, url, "dismiss")).status_code == 303
        assert f"Dismissed by {RECIPIENT}" in (await http.get(url)).text
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_DISMISSED


async def test_an_acknowledge_link_snoozes_for_30_minutes(rig: Rig) -> None:
    nid = await rig.send("links-snooze", notification_type="ops.mail")
    await rig.deliver()
    links = email_links(rig.smtp.messages[0])
    async with httpx.AsyncClient() as http:
        assert 'id="snooze"' not in (await http.get(links["Dismiss"])).text  # ack links only
        page = await http.get(links["Acknowledge"])
        assert 'id="snooze"' in page.text and "Snooze 30 min" in page.text
        assert (await click(http, links["Acknowledge"], "snooze")).status_code == 303
        after = await http.get(links["Acknowledge"])
        assert "Snoozed until" in after.text and 'id="ack"' in after.text  # still owed
        snoozed = await rig.get(nid)
        assert snoozed.ack_state == t.ACK_STATE_SNOOZED
        pause = snoozed.snooze_until_time.ToDatetime() - snoozed.update_time.ToDatetime()
        assert abs(pause - timedelta(minutes=30)) < timedelta(seconds=5)
        assert (await click(http, links["Acknowledge"], "ack")).status_code == 303
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_ACKED
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: any(e.kind == t.EVENT_KIND_ACKED for e in evs),
    )
    [snooze] = [
        json_format.MessageToDict(e.payload) for e in events if e.kind == t.EVENT_KIND_SNOOZED
    ]
    assert (snooze["actor"], snooze["via"], snooze["duration_seconds"]) == (RECIPIENT, "link", 1800)


async def test_forms_must_come_from_the_page(rig: Rig) -> None:
    nid = await rig.send("links-csrf", notification_type="ops.mail")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Acknowledge"]
    async with httpx.AsyncClient() as http:
        nonce = form_nonce((await http.get(url)).text)
        cross_site = await http.post(
            url,
            data={"action": "ack", "nonce": nonce},
            headers={"Origin": "https://evil.example"},
        )
        opaque = await http.post(
            url, data={"action": "ack", "nonce": nonce}, headers={"Origin": "null"}
        )
        no_nonce = await http.post(url, data={"action": "ack"})
        wrong_action = await http.post(url, data={"action": "dismiss", "nonce": nonce})
    async with httpx.AsyncClient() as other_browser:  # a nonce without its cookie
        stolen = await other_browser.post(url, data={"action": "ack", "nonce": nonce})
    for refused in (cross_site, opaque, no_nonce, wrong_action, stolen):
        assert refused.status_code == 403
    # Each says what to do; none of them claims the page expired.
    assert "Open the link first" in no_nonce.text
    assert "does not offer that answer" in wrong_action.text
    assert "opened in another browser" in stolen.text
    assert all("expired" not in r.text for r in (no_nonce, wrong_action, stolen))
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING


async def test_a_bare_post_says_to_open_the_page_first(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A POST with no form (a script, curl, a scanner that follows forms): nothing
    expired, the page was never opened; the refusal points at it and is logged."""
    nid = await rig.send("links-bare", notification_type="ops.mail")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Acknowledge"]
    with caplog.at_level(logging.INFO, logger="uns.links"):
        async with httpx.AsyncClient() as http:
            bare = await http.post(url)
            with_action = await http.post(url, data={"action": "ack"})
    for refused in (bare, with_action):
        assert refused.status_code == 403
        assert "Open the link first" in refused.text and "expired" not in refused.text
        assert f'href="{httpx.URL(url).path}"' in refused.text  # the page to open
    lines = [r.__dict__ for r in caplog.records if r.getMessage() == "link answer refused"]
    assert [(x["notification_id"], x["refused"]) for x in lines] == [(nid, "not_opened")] * 2
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING


async def test_answers_through_links_are_logged_like_provider_answers(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    nid = await rig.send("links-logged", notification_type="ops.mail")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Acknowledge"]
    with caplog.at_level(logging.INFO, logger="uns.links"):
        async with httpx.AsyncClient() as http:
            nonce = form_nonce((await http.get(url)).text)
            for _ in range(2):  # the second a repeat
                answered = await http.post(url, data={"action": "ack", "nonce": nonce})
                assert answered.status_code == 303
    lines = [r.__dict__ for r in caplog.records if r.getMessage() == "answered from a link"]
    assert [
        (x["notification_id"], x["actor"], x["via"], x["action"], x["repeat"]) for x in lines
    ] == [(nid, RECIPIENT, "link", "ack", False), (nid, RECIPIENT, "link", "ack", True)]


async def test_another_answer_first_is_a_conflict_shown_on_the_page(rig: Rig) -> None:
    nid = await rig.send("links-conflict")
    await rig.deliver()
    mail_url = email_links(rig.smtp.messages[0])["Dismiss"]
    hook_url = rig.fakes.calls("/hook")[0].json()["data"]["links"]["acknowledge"]
    async with httpx.AsyncClient() as mail_reader, httpx.AsyncClient() as hook_reader:
        stale_form = form_nonce((await mail_reader.get(mail_url)).text)
        assert (await click(hook_reader, hook_url, "ack")).status_code == 303
        page = await mail_reader.get(mail_url)
        assert "Acknowledged by webhook:hook" in page.text and 'id="dismiss"' not in page.text
        late = await mail_reader.post(mail_url, data={"action": "dismiss", "nonce": stale_form})
    assert late.status_code == 409 and "Someone else answered first." in late.text
    notification = await rig.get(nid)
    assert (notification.ack_state, notification.ack_actor) == (t.ACK_STATE_ACKED, "webhook:hook")


async def test_tampered_expired_revoked_and_unknown_links_are_one_plain_404(rig: Rig) -> None:
    nid = await rig.send("links-404", notification_type="ops.mail")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Acknowledge"]
    token = url.rpartition("/")[2]
    service = rig.server.app.links
    assert service is not None
    forged = service.signer.issue(
        LinkClaims(str(uuid.uuid4()), ("ack",), RECIPIENT, service.now() + timedelta(hours=1))
    )
    tampered = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    async with httpx.AsyncClient() as http:
        bodies = set()
        for bad in (tampered, forged, "not-a-token"):
            for method in ("GET", "POST"):
                answer = await http.request(
                    method, f"{rig.base_url}/a/{bad}", data={"action": "ack"}
                )
                assert answer.status_code == 404
                bodies.add(answer.text)
        assert (await http.get(url)).status_code == 200
        assert await service.revoke(token, actor="oscar") is not None
        revoked = await http.get(url)
        assert revoked.status_code == 404
        bodies.add(revoked.text)
        other = email_links(rig.smtp.messages[0])["Dismiss"]
        rig.clock.advance(minutes=31 + 1)  # past the deadline plus the lease
        expired = await http.get(other)
        assert expired.status_code == 404
        bodies.add(expired.text)
    assert len(bodies) == 1 and nid not in bodies.pop()
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING


async def test_a_link_sent_before_a_snooze_lives_until_the_moved_deadline(rig: Rig) -> None:
    nid = await rig.send("links-outlive-snooze", notification_type="ops.mail")
    await rig.deliver()
    links = email_links(rig.smtp.messages[0])  # they expire at 30 minutes plus the lease
    hours = Duration()
    hours.FromTimedelta(timedelta(hours=2))
    await rig.server.stub("rita").SnoozeNotification(
        pb.SnoozeNotificationRequest(notification_id=nid, duration=hours)
    )
    rig.clock.advance(minutes=45)  # past the links' own expiry; the deadline is at 150
    async with httpx.AsyncClient() as http:
        page = await http.get(links["Acknowledge"])
        assert page.status_code == 200 and "Snoozed until" in page.text
        assert (await click(http, links["Acknowledge"], "ack")).status_code == 303
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_ACKED
        # The obligation ended: past their own expiry, its links are one plain 404.
        assert (await http.get(links["Dismiss"])).status_code == 404
        assert (await http.get(links["Acknowledge"])).status_code == 404
        assert (
            await rig.server.app.links.revoke(links["Dismiss"].rpartition("/")[2], actor="o")
            is None
        )


async def test_a_snoozed_link_dies_after_the_moved_deadline(rig: Rig) -> None:
    nid = await rig.send("links-snooze-deadline", notification_type="ops.mail")
    await rig.deliver()
    links = email_links(rig.smtp.messages[0])
    hour = Duration()
    hour.FromTimedelta(timedelta(hours=1))
    await rig.server.stub("rita").SnoozeNotification(
        pb.SnoozeNotificationRequest(notification_id=nid, duration=hour)
    )
    async with httpx.AsyncClient() as http:
        rig.clock.advance(minutes=80)  # the moved deadline (90) not passed
        assert (await http.get(links["Dismiss"])).status_code == 200
        rig.clock.advance(minutes=10 + 2)  # past it, and the lease
        assert (await http.get(links["Dismiss"])).status_code == 404
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_SNOOZED  # no timer ran: still owed


async def test_a_withdrawn_ack_is_not_waiting_for_an_answer(rig: Rig) -> None:
    nid = await rig.send("links-withdrawn")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Acknowledge"]
    async with httpx.AsyncClient() as http:
        nonce = form_nonce((await http.get(url)).text)
        await rig.server.stub("alice").WithdrawNotification(
            pb.WithdrawNotificationRequest(notification_id=nid, reason="cleared")
        )
        late = await http.post(url, data={"action": "ack", "nonce": nonce})
    # ACK_NOT_PENDING, as for Acknowledge: not someone else's answer.
    assert late.status_code == 409 and "not waiting for an answer" in late.text
    assert "Someone else answered first." not in late.text
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_WITHDRAWN


async def test_late_answers_are_refused_like_acknowledge(rig: Rig) -> None:
    nid = await rig.send("links-late", notification_type="ops.mail")
    await rig.deliver()
    url = email_links(rig.smtp.messages[0])["Acknowledge"]
    async with httpx.AsyncClient() as http:
        nonce = form_nonce((await http.get(url)).text)
        rig.clock.advance(minutes=30, seconds=1)  # past the deadline, link still valid
        page = await http.get(url)
        assert "Not answered in time" in page.text and 'id="ack"' not in page.text
        late = await http.post(url, data={"action": "ack", "nonce": nonce})
    assert late.status_code == 409 and "deadline has passed" in late.text
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING


async def test_an_operator_revokes_one_link_with_uns_admin(rig: Rig) -> None:
    from tests.support.admin_cli import admin

    nid = await rig.send("links-admin-revoke", notification_type="ops.mail")
    await rig.deliver()
    links = email_links(rig.smtp.messages[0])
    url = rig.server.app.settings.database_url
    no_keys = await admin(url, "links", "revoke", links["Acknowledge"])
    assert no_keys.code == 2 and "--action-link-keys" in no_keys.err
    revoked = await admin(
        url, "links", "revoke", links["Acknowledge"], "--action-link-keys", LINK_KEY
    )
    assert revoked.code == 0, revoked
    assert f"revoked the ack link of notification {nid} for {RECIPIENT}" in revoked.err
    forged = await admin(
        url, "links", "revoke", links["Acknowledge"] + "x", "--action-link-keys", LINK_KEY
    )
    assert forged.code == 1 and "nothing to revoke" in forged.err
    async with httpx.AsyncClient() as http:
        assert (await http.get(links["Acknowledge"])).status_code == 404
        assert (await http.get(links["Dismiss"])).status_code == 200  # only that one
