"""Screenshots of the console's main pages for docs/console.md.

    scripts/console-screenshots            # writes docs/console/*.png

Starts a throw-away server (SQLite in a temporary directory, a loopback webhook
receiver), fills it with an hour of deliveries and a few dead letters, signs in with a
real headless Chromium and captures each page at laptop and phone widths.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.console.browser import launched
from tests.console.conftest import ConsoleRig, channels_yaml
from tests.console.people import put_people
from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import KEYS, ShiftableClock, start_server
from uns_server.domain.enums import DeliveryMode, Role
from uns_server.services import keys
from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore

LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


async def seed(rig: ConsoleRig) -> str:
    """An hour of traffic; returns a dead letter's id."""
    clock = rig.clock
    for i in range(12):
        clock.offset = -clock.offset.__class__(minutes=58 - 5 * i)
        for j in range(1 + (i * 7) % 5):
            await rig.send(f"ok-{i}-{j}", "ops.hook", title=f"Deploy {i}.{j} finished")
        await rig.deliver()
    clock.offset = clock.offset.__class__(0)
    rig.receiver.script(*[Reply.text("bad request", status=400) for _ in range(3)])
    rig.receiver.script(*[Reply.text("unavailable", status=503) for _ in range(2)])
    dead = [await rig.send(f"dead-{i}", "ops.batch", title=f"Nightly report {i}") for i in range(5)]
    await rig.deliver()
    await rig.send("ack", "ops.ack", title="Approve the database failover")
    await rig.deliver()
    db, now = rig.server.app.db, rig.clock()
    await keys.create(SqlStore(db), "deploy-bot", [Role.PRODUCER], "CI deploys", now)
    await keys.create(SqlStore(db), "oncall", [Role.RESPONDER, Role.OPERATOR], "on-call rota", now)
    _, old = await keys.create(SqlStore(db), "legacy-cron", [Role.PRODUCER], "retired host", now)
    await keys.revoke(SqlStore(db), old.id, now)
    await put_people(rig)
    return dead[0]


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        url = f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}"
        db = Database(url)
        await migrate.upgrade(db)
        await db.dispose()
        async with HttpReceiver() as receiver:
            (tmp_path / "channels.yaml").write_text(channels_yaml(receiver))
            for name, attempts in (("ops.hook", 3), ("ops.batch", 1), ("ops.hook", 1)):
                await activate_policy(
                    url,
                    name,
                    channels=["hook"],
                    delivery_mode=DeliveryMode.GUARANTEED,
                    require_ack=False,
                    max_attempts=attempts,
                )
            await activate_policy(
                url,
                "ops.ack",
                channels=["hook"],
                delivery_mode=DeliveryMode.GUARANTEED,
                require_ack=True,
                ack_timeout_minutes=30,
            )
            clock = ShiftableClock()
            server = await start_server(
                url,
                tmp_path,
                clock=clock,
                channels_file=str(tmp_path / "channels.yaml"),
                dispatch_enabled=False,
                http_listen="127.0.0.1:0",
            )
            rig = ConsoleRig(server, receiver, clock)
            try:
                dead = await seed(rig)
                await capture(rig, dead, out)
            finally:
                await server.stop()


async def capture(rig: ConsoleRig, dead: str, out: Path) -> None:
    async with launched() as browser:
        for label, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
            page = await browser.new_page(viewport=viewport, timezone_id="Europe/Berlin")
            await page.goto(rig.url("/console/sign-in"))
            if label == "laptop":
                await page.screenshot(path=str(out / "sign-in.png"))
            await page.get_by_label("Operator API key").fill(KEYS["oscar"])
            await page.locator("#sign-in").click()
            await page.wait_for_selector("#counts")
            shots = [("overview", "/console/"), ("notification", f"/console/notifications/{dead}")]
            if label == "laptop":
                shots += [
                    ("notifications", "/console/notifications"),
                    ("dead-letters", "/console/dead-letters?by=error"),
                    ("policy-diff", "/console/policies/ops.hook?a=1&b=2"),
                    ("keys", "/console/keys"),
                    ("people", "/console/people"),
                ]
            for name, path in shots:
                await page.goto(rig.url(path))
                if name == "overview":  # something for the live tail to show
                    await page.wait_for_selector("#tail-status:text('Live')")
                    await rig.send(f"live-{label}", "ops.ack", title="Approve the rollout")
                    await rig.deliver()
                    await page.wait_for_selector("#tail tr")
                suffix = "" if label == "laptop" else "-phone"
                await page.screenshot(path=str(out / f"{name}{suffix}.png"), full_page=True)
            if label == "laptop":
                await page.goto(rig.url("/console/dead-letters?by=type"))
                group = page.locator("section.group", has_text="ops.batch")
                await group.get_by_role("button", name="Preview replay of group").click()
                await page.wait_for_selector("#summary")
                await page.screenshot(path=str(out / "bulk-preview.png"), full_page=True)
            await page.close()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console")
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
