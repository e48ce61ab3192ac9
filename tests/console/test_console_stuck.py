"""A notification no replica can deliver explains itself on its console page and can
be withdrawn from there (SPEC §6); the page shows every field the producer sent. In
headless Chromium."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.console.browser import launched
from tests.console.conftest import ConsoleRig
from tests.support.http_receiver import HttpReceiver, unused_tcp_port
from tests.support.policies import activate_policy
from tests.support.server import KEYS, ShiftableClock, start_server
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_stuck_notification_says_why_and_is_withdrawn_from_its_page(
    console: ConsoleRig,
) -> None:
    from playwright.async_api import expect

    # Written before the channel left the configuration (PutPolicyRevision refuses it now).
    url = console.server.app.settings.database_url
    await activate_policy(
        url,
        "ops.gone",
        channels=["gone"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
    )
    stuck = await console.send(
        "stuck-1",
        "ops.gone",
        metadata={"host": "db-7", "region": "eu-west"},
        correlation_id="corr-42",
        dedup_key="disk-full-db-7",
        intent=t.NOTIFICATION_INTENT_WARNING,
    )
    console.clock.advance(minutes=20)

    async with launched() as browser:
        page = await browser.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        await page.goto(console.url("/console/sign-in"))
        await page.get_by_label("Operator API key").fill(KEYS["oscar"])
        await page.locator("#sign-in").click()
        await page.goto(console.url(f"/console/notifications/{stuck}"))

        waiting = page.locator("#waiting")
        await expect(waiting).to_contain_text("Stuck")
        await expect(waiting).to_contain_text("the channel gone, which this server does not have")
        await expect(waiting).to_contain_text("Due for 20 min")
        fields = page.locator("#fields")
        await expect(page.locator("#f-correlation")).to_have_text("corr-42")
        await expect(page.locator("#f-dedup")).to_contain_text("disk-full-db-7")
        await expect(page.locator("#f-intent")).to_have_text("WARNING")
        await expect(page.locator("#f-priority")).to_have_text("NORMAL")
        await expect(page.locator("#f-metadata")).to_contain_text("host")
        await expect(page.locator("#f-metadata")).to_contain_text("eu-west")
        await expect(fields).to_contain_text("stuck-1")  # the idempotency key

        await page.get_by_label("Reason for withdraw").fill("channel gone was retired")
        await page.locator("#confirm-withdraw").check()
        await page.locator("#do-withdraw").click()
        await expect(page.locator("#done")).to_contain_text("withdraw")
        await expect(page.locator("#state")).to_contain_text("WITHDRAWN")
        await expect(page.locator("#waiting")).to_have_count(0)
    assert (await console.get(stuck)).state == t.NOTIFICATION_STATE_WITHDRAWN


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_refused_connection_reads_as_a_sentence(db_url: str, tmp_path: Path) -> None:
    port = unused_tcp_port()
    channels = tmp_path / "channels.yaml"
    channels.write_text(
        f"down:\n  type: webhook\n  url: http://127.0.0.1:{port}/hook\n"
        "  secret: webhook-secret-for-tests\n  timeout_seconds: 1\n"
    )
    await activate_policy(
        db_url,
        "ops.down",
        channels=["down"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        max_attempts=1,
    )
    server = await start_server(
        db_url,
        tmp_path,
        channels_file=str(channels),
        dispatch_enabled=False,
        http_listen="127.0.0.1:0",
    )
    try:
        async with HttpReceiver() as unused:
            rig = ConsoleRig(server, unused, ShiftableClock())
            nid = await rig.send("down-1", "ops.down")
            assert await rig.deliver() == 1
            async with httpx.AsyncClient() as http:
                await rig.sign_in(http)
                page = (await http.get(rig.url(f"/console/notifications/{nid}"))).text
    finally:
        await server.stop()
    attempts = page[page.index('id="attempts"') :]
    assert f"connection refused to 127.0.0.1:{port}" in attempts
    assert "the provider did not act on it." in attempts
    for python in ("provider_effect_possible", "ClientConnectorError", "False"):
        assert python not in attempts


async def test_dead_letters_and_their_preview_show_titles_and_channel_health(
    console: ConsoleRig,
) -> None:
    [nid] = await console.dead_letters("titled", 1, "ops.hook")
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        triage = (await http.get(console.url("/console/dead-letters"))).text
        preview = (
            await http.post(
                console.url("/console/dead-letters/preview"),
                data={"csrf": csrf, "op": "replay", "id": nid},
            )
        ).text
    where = f"127.0.0.1:{console.receiver.port}"  # the provider's host and port
    health = f"hook at {where}: 0% of 1 attempts succeeded in the last hour; last error: HTTP 400"
    for page in (triage, preview):
        assert "Disk almost full" in page  # the title, beside the id
        assert health in page, page


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_responder_keys_responds_for_is_set_and_shown(console: ConsoleRig) -> None:
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        created = await http.post(
            console.url("/console/keys"),
            data={
                "csrf": csrf,
                "principal": "pager-bot",
                "role": "responder",
                "responds_for": "alice, bob",
            },
        )
        assert created.status_code == 200, created.text
        refused = await http.post(
            console.url("/console/keys"),
            data={"csrf": csrf, "principal": "x", "role": "producer", "responds_for": "alice"},
        )
        assert refused.status_code == 400 and "responds_for" in refused.text
        listing = (await http.get(console.url("/console/keys"))).text
    row = next(r for r in listing.split("<tr>") if "pager-bot" in r)
    assert '<td class="responds-for">alice, bob</td>' in row


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_the_live_tail_filters_by_kind_and_type_and_caps_its_rows(
    console: ConsoleRig,
) -> None:
    from playwright.async_api import expect

    async with launched() as browser:
        page = await browser.new_page()
        await page.goto(console.url("/console/sign-in"))
        await page.get_by_label("Operator API key").fill(KEYS["oscar"])
        await page.locator("#sign-in").click()
        await page.goto(console.url("/console/?kind=ACCEPTED&type=ops.batch&rows=25"))
        tail = page.locator("#tail")
        assert await tail.get_attribute("data-max") == "25"
        await expect(page.locator("#tail-status")).to_have_text("Live")
        await console.send("tail-hook", "ops.hook")  # another type: not shown
        for i in range(27):
            await console.send(f"tail-batch-{i}", "ops.batch")
        await console.deliver()  # attempts and results: other kinds, not shown
        await expect(tail.locator("tr")).to_have_count(25)
        kinds = await tail.locator("tr td:nth-child(2)").all_text_contents()
        assert set(kinds) == {"ACCEPTED"}
        links = await tail.locator("tr a").all_text_contents()
        assert all(text.startswith("ops.batch ") for text in links)
