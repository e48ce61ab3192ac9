"""The console's notification page (SPEC §7, issue 45), on SQLite: it
names the routing rule that chose where the notification went, and its timeline says
when a template failed and the raw text was sent instead."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx

from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.people import put_policy
from tests.support.server import KEYS, send_request, start_server
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import types_pb2 as t

_TAG = re.compile(r"<[^>]+>")


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", fragment)).split())


async def test_the_page_names_the_rule_and_a_failed_template(db_url: str, tmp_path: Path) -> None:
    async with HttpReceiver() as rx:
        rx.default = Reply(status=204)
        channels = tmp_path / "channels.yaml"
        channels.write_text(f"hook:\n  type: webhook\n  url: {rx.url('/hook')}\n  secret: s\n")
        server = await start_server(
            db_url,
            tmp_path,
            channels_file=str(channels),
            dispatch_enabled=False,
            http_listen="127.0.0.1:0",
        )
        try:
            spec = ppb.PolicySpec(
                channels=["log"],
                delivery_mode=t.DELIVERY_MODE_GUARANTEED,
                rules=[ppb.RoutingRule(filter="metadata.cluster = prod", channels=["hook"])],
                templates=[ppb.Template(channel_type="webhook", title="{{ metadata.team }}")],
            )
            await put_policy(server, "db.replica_lag", spec)
            sent = await server.stub("alice").SendNotification(
                send_request(notification_type="db.replica_lag", metadata={"cluster": "prod"})
            )
            assert (await server.app.dispatcher.run_once()).claimed == 1
            [delivered] = await rx.wait_for_requests(1)
            assert delivered.json()["data"]["title"] == "Disk almost full"  # the raw title
            base = f"http://127.0.0.1:{server.app.http_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                signed_in = await http.post("/console/sign-in", data={"api_key": KEYS["oscar"]})
                assert signed_in.status_code == 303
                page = await http.get(f"/console/notifications/{sent.notification_id}")
            assert page.status_code == 200
            routed = page.text.split('id="f-rule">', 1)[1].split("</dd>", 1)[0]
            assert text_of(routed) == "rule 0 of revision 1: metadata.cluster = prod"
            assert (
                "template failed, raw text sent: UndefinedError: 'dict object' has no attribute"
                " 'team'"
            ) in text_of(page.text)
        finally:
            await server.stop()
