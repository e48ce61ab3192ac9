"""The console's people page in a real headless Chromium: people and rotations written
through uns.v1.RecipientService, who is on call now (an override wins) and
who is next; the page follows the server's clock across a hand-off."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.console.browser import launched
from tests.console.conftest import ConsoleRig
from tests.console.people import put_people
from tests.support.server import KEYS


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_the_people_page_says_who_is_on_call_now_and_next(console: ConsoleRig) -> None:
    from playwright.async_api import expect

    await put_people(console)
    async with launched() as browser:
        page = await browser.new_page(timezone_id="UTC")
        await page.goto(console.url("/console/sign-in"))
        await page.get_by_label("Operator API key").fill(KEYS["oscar"])
        await page.locator("#sign-in").click()
        await page.wait_for_selector("#counts")
        await page.get_by_role("link", name="People").click()
        await expect(page.get_by_role("heading", name="People and on-call")).to_be_visible()

        primary = page.locator("#rotation-primary")
        await expect(primary.locator(".oncall-now")).to_have_text("Alice Martin")
        await expect(primary.locator(".oncall-next")).to_have_text("Bob Okafor")
        secondary = page.locator("#rotation-secondary")
        await expect(secondary.locator(".oncall-now")).to_have_text("Carol Ng (override)")
        await expect(secondary).to_contain_text("1 hour")  # the shift, as people say it

        bob = page.locator("#person-bob")
        await expect(bob).to_contain_text("America/New_York")
        await expect(bob).to_contain_text("hook: https://hooks.example.com/bob")
        await expect(bob).to_contain_text("22:00\N{EN DASH}07:00")
        await expect(page.locator("#person-alice")).to_contain_text("none")  # no quiet hours

        # Past the hand-off (and the override), inside the session's idle limit.
        console.clock.offset += timedelta(minutes=25)
        await page.reload()
        # Bob may be inside his quiet hours now (then marked held): his name alone.
        await expect(primary.locator(".oncall-now .person")).to_have_text("Bob Okafor")
        await expect(primary.locator(".oncall-next")).to_have_text("Alice Martin")
        await expect(secondary.locator(".oncall-now")).to_have_text("Alice Martin")
