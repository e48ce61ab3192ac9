"""The example policies of docs/CONTRACT.md (routing rules, templates) are read as
``uns-admin policies put`` reads a file and accepted by a real server, on SQLite;
the rules route as the page says and the templates render."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from tests.support.docs import marked_block
from tests.support.people import minutes, put_policy, put_recipients, put_rotation
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import recipient_service_pb2 as rpb
from uns_server.api.policy_servicer import spec_to_wire
from uns_server.services.policy_documents import inputs_from_document

CHANNELS = "".join(f"{name}:\n  type: log\n" for name in ("ops-chat", "pagerduty", "staging-chat"))


async def _server(db_url: str, tmp_path: Path) -> RunningServer:
    channels = tmp_path / "channels.yaml"
    channels.write_text(CHANNELS)
    server = await start_server(
        db_url, tmp_path, channels_file=str(channels), dispatch_enabled=False
    )
    await put_recipients(
        server,
        [
            rpb.Recipient(
                recipient_id="ana",
                display_name="Ana",
                time_zone="UTC",
                locale="fr-CA",
                contacts=[rpb.Contact(channel="ops-chat", address="ana")],
            )
        ],
    )
    await put_rotation(
        server,
        "db-primary",
        ["ana"],
        start=datetime(2026, 1, 1, tzinfo=UTC),
        shift=minutes(7 * 24 * 60),
    )
    return server


async def _put(server: RunningServer, marker: str) -> str:
    [item] = inputs_from_document(yaml.safe_load(marked_block("docs/CONTRACT.md", marker, "yaml")))
    await put_policy(server, item.notification_type, spec_to_wire(item.spec))
    return item.notification_type


async def test_the_routing_example(db_url: str, tmp_path: Path) -> None:
    server = await _server(db_url, tmp_path)
    try:
        kind = await _put(server, "rules-yaml")
        expected = {
            ("prod", "NOTIFICATION_INTENT_SAFETY"): (0, []),
            ("prod", "NOTIFICATION_INTENT_WARNING"): (1, ["ops-chat", "pagerduty"]),
            ("staging", "NOTIFICATION_INTENT_WARNING"): (2, ["staging-chat"]),
        }
        for (cluster, intent), (index, channels) in expected.items():
            reply = await server.stub("alice").Simulate(
                pb.SimulateRequest(
                    request=send_request(
                        notification_type=kind, intent=intent, metadata={"cluster": cluster}
                    )
                )
            )
            assert reply.effective_policy.matched_rule_index == index
            assert list(reply.resolved_channels) == channels
    finally:
        await server.stop()


async def test_the_templates_example(db_url: str, tmp_path: Path) -> None:
    server = await _server(db_url, tmp_path)
    try:
        kind = await _put(server, "templates-yaml")
        reply = await server.stub("alice").Simulate(
            pb.SimulateRequest(
                request=send_request(notification_type=kind, metadata={"cluster": "prod-eu"})
            )
        )
        [message] = reply.planned_steps[0].messages
        assert (message.recipient_id, message.template_index, message.template_error) == (
            "ana",
            2,
            "",
        )
        assert message.body == "92% used on db-1\n\nCluster prod-eu, for Ana."
    finally:
        await server.stop()
