"""A revoked key's open WatchEvents streams end (issue 42): over gRPC and as Server-Sent
Events over HTTP, with UNAUTHENTICATED (ErrorInfo ``UNAUTHENTICATED``, metadata
``resume_after_sequence``), even when the stream is idle.

Heartbeats are set far apart, so only the credential re-check's own timer can end the
stream; its period and the key cache's are shortened so the test waits little (the
defaults are what docs/deployment.md states). The test waits on the stream ending, with
a generous bound, never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.server import KEYS, RunningServer, start_server
from uns.v1 import key_service_pb2 as kpb
from uns.v1 import key_service_pb2_grpc as kpb_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns_server.services import auth, keys
from uns_server.services.watch import streams

WATCH_PATH = "/uns.v1.NotificationService/WatchEvents"
QUIET = 3600.0  # heartbeat seconds: nothing is sent on its own during the test


@pytest.fixture(autouse=True)
def prompt_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "CREDENTIAL_RECHECK_SECONDS", 0.2)
    monkeypatch.setattr(auth, "CACHE_SECONDS", 0.2)


def operator(server: RunningServer) -> tuple[kpb_grpc.KeyServiceStub, list[tuple[str, str]]]:
    channel = grpc.aio.insecure_channel(server.target)
    server.channels.append(channel)
    return kpb_grpc.KeyServiceStub(channel), [("authorization", f"Bearer {KEYS['oscar']}")]


async def new_key(server: RunningServer) -> tuple[str, str]:
    """A producer key of alice's, stored in the database: (its secret, its id)."""
    stub, metadata = operator(server)
    created = await stub.CreateApiKey(
        kpb.CreateApiKeyRequest(principal="alice", roles=["ROLE_PRODUCER"]), metadata=metadata
    )
    return created.secret, created.api_key.id


async def test_a_revoked_keys_grpc_stream_ends_unauthenticated(db_url: str, tmp_path: Path) -> None:
    server = await start_server(
        db_url, tmp_path, dispatch_enabled=False, watch_heartbeat_seconds=QUIET
    )
    try:
        secret, key_id = await new_key(server)
        channel = grpc.aio.insecure_channel(server.target)
        server.channels.append(channel)
        stream = pb_grpc.NotificationServiceStub(channel).WatchEvents(
            pb.WatchEventsRequest(), metadata=[("authorization", f"Bearer {secret}")]
        )
        first = await anext(aiter(stream))  # the positioning heartbeat: the stream is open
        assert first.HasField("heartbeat")
        stub, metadata = operator(server)
        await stub.RevokeApiKey(kpb.RevokeApiKeyRequest(key=key_id), metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async with asyncio.timeout(60):
                async for item in stream:  # nothing else comes: it is idle
                    raise AssertionError(f"the revoked key's stream sent {item}")
        error = rich_error(raised.value)
        assert (error.code, error.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
        resume = int(error.metadata["resume_after_sequence"])
        assert resume == first.heartbeat.high_water_sequence
        assert server.app.watch.open_streams("alice") == 0
    finally:
        await server.stop()


async def test_a_revoked_keys_server_sent_events_end_with_an_error_event(
    db_url: str, tmp_path: Path
) -> None:
    server = await start_server(
        db_url,
        tmp_path,
        dispatch_enabled=False,
        watch_heartbeat_seconds=QUIET,
        http_listen="127.0.0.1:0",
    )
    try:
        secret, key_id = await new_key(server)
        base = f"http://127.0.0.1:{server.app.http_port}"
        headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {secret}"}
        async with (
            aiohttp.ClientSession(base) as session,
            session.get(WATCH_PATH, headers=headers) as response,
        ):
            assert response.status == 200
            lines = aiter(response.content)
            assert (await anext(lines)).decode().startswith("event: heartbeat")
            # Revoked as uns-admin does in database mode (or another replica): this
            # server learns it only from the database.
            await keys.revoke(server.app.store, key_id, server.app.clock())
            async with asyncio.timeout(60):
                seen = [raw.decode().rstrip("\n") async for raw in lines]
        events = [line.removeprefix("event: ") for line in seen if line.startswith("event: ")]
        assert events == ["error"], seen
        error = seen[seen.index("event: error") :]
        body = json.loads(next(line.removeprefix("data: ") for line in error if "data: " in line))
        assert body["code"] == "unauthenticated"
        (info,) = [d for d in body["details"] if d["type"] == "google.rpc.ErrorInfo"]
        assert info["debug"]["reason"] == "UNAUTHENTICATED"
        assert "resume_after_sequence" in info["debug"]["metadata"]
        assert server.app.watch.open_streams("alice") == 0
    finally:
        await server.stop()
