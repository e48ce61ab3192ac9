"""A notification no replica can deliver explains itself on its console page and can
be withdrawn from there (SPEC §6); the page shows every field the producer sent. In
headless Chromium."""

from __future__ import annotations

import pytest

from tests.console.browser import launched
from tests.console.conftest import ConsoleRig
from tests.support.policies import activate_policy
from tests.support.server import KEYS
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
