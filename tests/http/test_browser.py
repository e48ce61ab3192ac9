"""A real headless Chromium answers from a captured email: opens the Acknowledge link,
sees the page, clicks, sees the outcome, while a WatchEvents subscriber gets ACKED.

Debian's ``chromium`` driven by Playwright through ``executable_path`` (no browser
download); ``scripts/install-tools.sh`` installs it. Without it the test skips, and
fails under ``UNS_REQUIRE_TOOLCHAINS=1`` (CI).
"""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from google.protobuf import json_format

from tests.http.conftest import Rig
from tests.http.helpers import email_links
from tests.support.watching import WAIT_SECONDS, positioned
from tests.toolchain.tools import require_module, skip_or_fail
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

RECIPIENT = "email:oncall@example.com"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    skip_or_fail("chromium not found: run scripts/install-tools.sh (apt-get install chromium)")
    raise AssertionError("unreachable")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_person_acknowledges_from_an_email_in_a_real_browser(rig: Rig) -> None:
    executable = _chromium()
    require_module("playwright")
    from playwright.async_api import async_playwright, expect

    watcher = rig.server.stub("oscar").WatchEvents(
        pb.WatchEventsRequest(kinds=[t.EVENT_KIND_ACKED]), timeout=None
    )
    await positioned(watcher)
    nid = await rig.send("browser-ack", notification_type="ops.mail", title="Disk <b>full</b>")
    assert await rig.deliver() == 1
    url = email_links(rig.smtp.messages[0])["Acknowledge"]

    sandbox = [] if os.getuid() else ["--no-sandbox"]  # Chromium refuses root otherwise
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, args=sandbox)
        try:
            page = await browser.new_page()
            await page.goto(url)
            # Producer text is escaped, never markup.
            await expect(page.locator("#title")).to_have_text("Disk <b>full</b>")
            await expect(page.locator("#recipient")).to_have_text(RECIPIENT)
            assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING  # seeing is not acking
            await page.locator("#ack").click()
            await expect(page.locator("#outcome")).to_contain_text(
                f"Acknowledged by {RECIPIENT} at "
            )
            await expect(page.locator("#ack")).to_have_count(0)
        finally:
            await browser.close()

    async def first_acked() -> t.Event:
        async for response in watcher:
            if response.HasField("event"):
                return response.event
        raise AssertionError("stream ended")

    event = await asyncio.wait_for(first_acked(), WAIT_SECONDS)
    watcher.cancel()
    assert event.notification_id == nid
    payload = json_format.MessageToDict(event.payload)
    assert (payload["actor"], payload["via"]) == (RECIPIENT, "link")
