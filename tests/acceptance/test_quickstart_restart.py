"""``scripts/serve`` itself: text logs carry their fields, the `log` channel's links
survive a restart (the dev link key is kept, 0600, beside the dev key), and /metrics
is on with per-RPC and process metrics."""

from __future__ import annotations

import re
import stat
import uuid
from pathlib import Path

import grpc
import httpx

from tests.support.postgres import free_port
from tests.support.process import ServerProcess
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t

SERVE = Path(__file__).resolve().parents[2] / "scripts" / "serve"


def start(tmp_path: Path, http_port: int, metrics_port: int) -> ServerProcess:
    server = ServerProcess(
        tmp_path,
        "--database-url",
        f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}",
        "--dev-key-file",
        str(tmp_path / "uns-dev-key.txt"),
        "--http-listen",
        f"127.0.0.1:{http_port}",
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
        program=[str(SERVE)],
    )
    server.wait_serving()
    return server


def send(server: ServerProcess, key: str) -> str:
    with grpc.insecure_channel(server.target) as channel:
        reply = pb_grpc.NotificationServiceStub(channel).SendNotification(
            pb.SendNotificationRequest(
                notification_type="demo.alert",
                intent=t.NOTIFICATION_INTENT_WARNING,
                title="Disk almost full",
                message="92% used on db-1",
                source="disk-monitor",
                idempotency_key=str(uuid.uuid4()),
                require_ack=True,
                wait_for_first_attempt=True,
            ),
            metadata=[("authorization", f"Bearer {key}")],
            timeout=30,
        )
    return str(reply.notification_id)


def test_quickstart_links_survive_a_restart_and_logs_keep_their_fields(tmp_path: Path) -> None:
    http_port, metrics_port = free_port(), free_port()
    server = start(tmp_path, http_port, metrics_port)
    try:
        key = (tmp_path / "uns-dev-key.txt").read_text().strip()
        nid = send(server, key)
        out = server.output()
        # Text logs: the log channel's line carries fields, not a JSON string.
        [line] = [x for x in out.splitlines() if "uns notification Disk almost full" in x]
        assert f"notification_id={nid}" in line and "channel=log" in line
        ack = re.search(r'"acknowledge":"(http://[^"]+)"', line)
        assert ack, line
        assert '"notification_id"' not in line  # no JSON-encoded record in the message
        settled = [x for x in out.splitlines() if "delivery attempt settled" in x]
        assert all(f"notification_id={nid}" in x for x in settled)
        assert httpx.get(ack.group(1)).status_code == 200
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert 'uns_rpc_server_duration_seconds_count{code="OK",method="' in metrics
        assert "process_resident_memory_bytes" in metrics
    finally:
        assert server.stop() == 0

    link_key = tmp_path / "uns-dev-link-key.txt"
    assert stat.S_IMODE(link_key.stat().st_mode) == 0o600
    first_key = link_key.read_text()
    server = start(tmp_path, http_port, metrics_port)
    try:
        page = httpx.get(ack.group(1))
        assert page.status_code == 200, page.text  # signed with the kept key
        assert link_key.read_text() == first_key
    finally:
        server.stop()
