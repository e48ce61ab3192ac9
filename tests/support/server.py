"""Start a real UNS server on a loopback port and talk to it through the stubs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.trace import TracerProvider

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns_server.app import App
from uns_server.settings import Settings

# Known keys for tests: name -> secret. The key file maps them to principals/roles.
KEYS = {
    "alice": "uns_test_alice_producer",
    "bob": "uns_test_bob_producer",
    "rita": "uns_test_rita_responder",
    "oscar": "uns_test_oscar_operator",
}
_ROLES = {"alice": ["producer"], "bob": ["producer"], "rita": ["responder"], "oscar": ["operator"]}
# rita answers for both producers (SPEC §3 tenancy: a responder acts only for its own
# principal and those its key responds for).
RESPONDS_FOR = {"rita": ["alice", "bob"]}


def write_key_file(directory: Path) -> Path:
    path = directory / "keys.json"
    entries = [
        {
            "key": KEYS[n],
            "principal": n,
            "roles": _ROLES[n],
            "responds_for": RESPONDS_FOR.get(n, []),
        }
        for n in KEYS
    ]
    path.write_text(json.dumps(entries))
    return path


@dataclass
class RunningServer:
    app: App
    target: str
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    def stub(self, who: str = "alice") -> Client:
        channel = grpc.aio.insecure_channel(self.target)
        self.channels.append(channel)
        return Client(pb_grpc.NotificationServiceStub(channel), KEYS.get(who, who))

    async def stop(self) -> None:
        for channel in self.channels:
            await channel.close()
        await self.app.stop(grace=1.0)


@dataclass
class Client:
    """A stub plus the caller's credentials, so tests read like calls."""

    stub: pb_grpc.NotificationServiceStub
    key: str

    @property
    def metadata(self) -> Sequence[tuple[str, str]]:
        return (("authorization", f"Bearer {self.key}"),)

    def __getattr__(self, rpc: str) -> Any:
        method = getattr(self.stub, rpc)

        def call(request: Any, **kwargs: Any) -> Any:
            return method(
                request, metadata=self.metadata, timeout=kwargs.pop("timeout", 10), **kwargs
            )

        return call


class ShiftableClock:
    """Real time plus an offset the test can move forward (ack deadlines, windows)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, **kwargs: float) -> None:
        self.offset += timedelta(**kwargs)


async def start_server(
    db_url: str,
    tmp_path: Path,
    *,
    clock: ShiftableClock | None = None,
    tracer_provider: TracerProvider | None = None,
    **overrides: Any,
) -> RunningServer:
    defaults: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "dev_key_file": str(tmp_path / "dev-key.txt"),
        "idle_poll_seconds": 0.5,
        "log_format": "text",
        # Request budgets are tested where they are the subject (tests/security/
        # test_load_shedding.py); elsewhere tests send as fast as they like.
        "rate_limit_per_second": 0,
        "auth_failures_per_second": 0,
        # Most tests send types without a policy (demo.alert) and read what the log
        # channel did, as on scripts/serve; the refusal without default channels
        # (NO_POLICY) is tested by passing default_channels="".
        "default_channels": "log",
    }
    if "api_keys_file" not in overrides:
        defaults["api_keys_file"] = str(write_key_file(tmp_path))
    settings = Settings(database_url=db_url, **{**defaults, **overrides})
    app = App(settings, clock=clock or ShiftableClock(), tracer_provider=tracer_provider)
    await app.start()
    await app.ready.wait()
    return RunningServer(app, f"127.0.0.1:{app.port}")


def send_request(**fields: Any) -> pb.SendNotificationRequest:
    """A valid request; keyword arguments override fields."""
    values: dict[str, Any] = {
        "notification_type": "demo.alert",
        "intent": "NOTIFICATION_INTENT_WARNING",
        "title": "Disk almost full",
        "message": "92% used on db-1",
        "source": "disk-monitor",
    }
    values.update(fields)
    metadata = values.pop("metadata", None)
    request = pb.SendNotificationRequest(**values)
    if metadata is not None:
        request.metadata.update(metadata)
    return request
