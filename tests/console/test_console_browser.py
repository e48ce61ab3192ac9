"""The console in a real headless Chromium: sign in, find the dead letters, preview and
replay a whole group, watch a notification's timeline receive its new events live, and
read its policy at phone width."""

from __future__ import annotations

import pytest

from tests.console.browser import launched
from tests.console.conftest import ConsoleRig
from tests.support.server import KEYS
from uns.v1 import types_pb2 as t


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_an_operator_replays_a_group_and_watches_it_deliver_live(
    console: ConsoleRig,
) -> None:
    from playwright.async_api import expect

    batch = await console.dead_letters("group", 2, "ops.batch")
    [other] = await console.dead_letters("other", 1, "ops.hook")

    async with launched() as browser:
        page = await browser.new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # the confirmation before acting
        await page.goto(console.url("/console/"))
        await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        await page.get_by_label("Operator API key").fill(KEYS["oscar"])
        await page.locator("#sign-in").click()
        await expect(page.locator("#counts")).to_contain_text("Failed, needs action")
        await page.keyboard.press("Tab")  # keyboard users start at "Skip to content"
        await expect(page.get_by_role("link", name="Skip to content")).to_be_focused()

        await page.get_by_role("link", name="Dead letters").click()
        group = page.locator("section.group", has_text="ops.batch")
        await expect(group.locator(".count")).to_have_text("2")
        await group.get_by_role("button", name="Preview replay of group").click()

        await expect(page.locator("#summary")).to_contain_text("2 would be replayed")
        await expect(page.locator("#summary")).to_contain_text("0 would be refused")
        assert (await console.get(batch[0])).state == t.NOTIFICATION_STATE_FAILED  # a preview
        await page.get_by_label("Reason").fill("receiver fixed")
        await page.locator("#confirm").check()
        await page.locator("#apply").click()
        await expect(page.locator("#summary")).to_contain_text("2 done")
        for nid in batch:
            assert (await console.get(nid)).state == t.NOTIFICATION_STATE_PENDING
        assert (await console.get(other)).state == t.NOTIFICATION_STATE_FAILED

        await page.get_by_role("link", name=batch[0]).click()
        timeline = page.locator("#timeline")
        await expect(timeline).to_contain_text("REPLAY_REQUESTED")
        await expect(timeline).to_contain_text("by oscar via console: receiver fixed")
        await expect(page.locator("#tail-status")).to_have_text("Live")
        await expect(page.locator("#stale")).to_be_hidden()
        # Times are shown in the viewer's zone, with UTC on hover.
        assert "UTC" in (await timeline.locator("time").first.get_attribute("title") or "")

        assert await console.deliver() == 2  # the receiver answers 200 now
        fresh = timeline.locator("li.new")
        await expect(fresh.locator(".kind")).to_contain_text(
            ["CHANNEL_ATTEMPT_RESULT", "DELIVERY_RESULT"]
        )
        await expect(fresh.last).to_contain_text("DELIVERED")
        await expect(page.locator("#stale")).to_be_visible()  # fields are out of date now

        # Long policy JSON (its 64-hex hashes) wraps at phone width instead of
        # pushing the page sideways.
        await page.set_viewport_size({"width": 360, "height": 800})
        policy = page.locator("#policy")
        await expect(policy).to_contain_text("effective_hash")
        assert await policy.evaluate("e => e.scrollWidth <= e.clientWidth")
        assert await page.evaluate(
            "() => document.documentElement.scrollWidth <= window.innerWidth"
        )
    assert (await console.get(batch[0])).state == t.NOTIFICATION_STATE_DELIVERED
