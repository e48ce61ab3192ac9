"""Outside gRPC tools against a live uns-server, through server reflection alone.

grpcurl, ghz and grpc-health-probe know nothing of uns.v1 but what reflection tells
them. ``describe Service.Method`` and ghz's ``--call`` ask reflection for the file
containing the *method* symbol, which the server once answered "Symbol not found".
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import grpc
import pytest

from tests.support.process import ServerProcess
from tests.toolchain.tools import find_tool
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc

METHOD = "uns.v1.NotificationService.SendNotification"
GHZ_REQUESTS = 24


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`uns-server` with no configuration at all (SQLite, a development key), shared by
    this module's tests (none of them depends on what another one sent)."""
    server = ServerProcess(tmp_path_factory.mktemp("quickstart"))
    try:
        server.wait_serving()
        yield server
    finally:
        server.stop()


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_grpcurl_describes_a_method(quickstart: ServerProcess) -> None:
    grpcurl = find_tool("grpcurl")
    described = _run(grpcurl, "-plaintext", quickstart.target, "describe", METHOD)
    assert described.returncode == 0, described.stderr
    assert f"{METHOD} is a method" in described.stdout
    assert "rpc SendNotification ( .uns.v1.SendNotificationRequest )" in described.stdout
    # The proto comments, from the descriptor set with source info.
    assert "// Accepts an obligation durably and then dispatches it." in described.stdout
    message = _run(grpcurl, "-plaintext", quickstart.target, "describe", "uns.v1.Heartbeat")
    assert message.returncode == 0, message.stderr
    assert "// Heartbeat tells a subscriber how far the stream has progressed." in message.stdout
    check = "grpc.health.v1.Health.Check"
    health = _run(grpcurl, "-plaintext", quickstart.target, "describe", check)
    assert health.returncode == 0, health.stderr
    missing = _run(grpcurl, "-plaintext", quickstart.target, "describe", "uns.v1.NoSuch.Method")
    assert missing.returncode != 0
    assert "Symbol not found" in missing.stderr


def test_grpc_health_probe(quickstart: ServerProcess) -> None:
    probe = find_tool("grpc-health-probe")
    for service in ("", "uns.v1.NotificationService"):
        result = _run(probe, f"-addr={quickstart.target}", f"-service={service}")
        assert result.returncode == 0, result.stderr
        assert "status: SERVING" in result.stdout + result.stderr
    unknown = _run(probe, f"-addr={quickstart.target}", "-service=uns.v1.NoSuchService")
    assert unknown.returncode != 0  # NOT_FOUND for a service the server does not serve


def test_ghz_sends_through_reflection(quickstart: ServerProcess) -> None:
    ghz = find_tool("ghz")
    key = (quickstart.cwd / "uns-dev-key.txt").read_text().strip()
    request = {
        "notification_type": "demo.alert",
        "intent": "NOTIFICATION_INTENT_WARNING",
        "title": "Disk almost full",
        "message": "92% used on db-1",
        "source": "ghz",
        # ghz fills in the template per request: one notification each.
        "idempotency_key": "ghz-{{.RequestNumber}}",
        "metadata": {"host": "db-1", "used_pct": 92},
    }
    result = _run(
        ghz, "--insecure", f"--call={METHOD}", f"--total={GHZ_REQUESTS}", "--concurrency=4",
        f"--data={json.dumps(request)}",
        f"--metadata={json.dumps({'authorization': f'Bearer {key}'})}",
        "--format=json", quickstart.target,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["statusCodeDistribution"] == {"OK": GHZ_REQUESTS}, report["errorDistribution"]

    with grpc.insecure_channel(quickstart.target) as channel:
        listed = pb_grpc.NotificationServiceStub(channel).ListNotifications(
            pb.ListNotificationsRequest(filter='source = "ghz"', page_size=100),
            metadata=(("authorization", f"Bearer {key}"),),
        )
    assert len(listed.notifications) == GHZ_REQUESTS
