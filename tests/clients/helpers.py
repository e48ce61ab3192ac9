"""Shared helpers for the client tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from tests.support.server import KEYS, RunningServer, ShiftableClock, write_key_file
from uns.v1 import types_pb2 as t
from uns_clients import ClientConfig, EventStream
from uns_server.app import App
from uns_server.settings import Settings

# Fast retries: the tests exercise the policy, not the patience.
FAST_RETRIES: dict[str, Any] = {
    "retry_initial_backoff_seconds": 0.02,
    "retry_max_backoff_seconds": 0.2,
}

# A valid send(); keyword arguments override.
SEND: dict[str, Any] = {
    "notification_type": "demo.alert",
    "intent": "WARNING",
    "title": "Disk almost full",
    "message": "92% used on db-1",
    "source": "disk-monitor",
}

WAIT_SECONDS = 30.0


def config_for(target: str, who: str = "alice", **fields: Any) -> ClientConfig:
    """A client configuration for one of the test keys (or a literal key)."""
    return ClientConfig(target, api_key=KEYS.get(who, who), **{**FAST_RETRIES, **fields})


def send_fields(**overrides: Any) -> dict[str, Any]:
    return {**SEND, **overrides}


async def start_server_on(
    db_url: str, tmp_path: Path, port: int, **overrides: Any
) -> RunningServer:
    """``tests.support.server.start_server``, but on a given port (to restart a server
    where its clients expect it)."""
    settings = Settings(
        database_url=db_url,
        listen=f"127.0.0.1:{port}",
        api_keys_file=str(write_key_file(tmp_path)),
        dev_key_file=str(tmp_path / "dev-key.txt"),
        idle_poll_seconds=0.5,
        log_format="text",
        **{"default_channels": "log", **overrides},  # as start_server
    )
    app = App(settings, clock=ShiftableClock())
    await app.start()
    await app.ready.wait()
    return RunningServer(app, f"127.0.0.1:{app.port}")


async def collect_until(
    stream: EventStream, done: Callable[[list[t.Event]], bool], within: float = WAIT_SECONDS
) -> list[t.Event]:
    """Events from ``stream`` until ``done(events)`` holds."""
    events: list[t.Event] = []
    async with asyncio.timeout(within):
        async for event in stream:
            events.append(event)
            if done(events):
                break
    return events


async def eventually(
    check: Callable[[], Awaitable[Any]], within: float = WAIT_SECONDS, every: float = 0.05
) -> Any:
    """Poll ``check()`` until it returns something truthy (for state without a signal)."""
    async with asyncio.timeout(within):
        while True:
            result = await check()
            if result:
                return result
            await asyncio.sleep(every)


class FakeRpcError(grpc.RpcError):
    """What blocking stubs raise: an RpcError with the grpc.Call accessors."""

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str = "fake",
        trailing: tuple[tuple[str, bytes], ...] = (),
    ) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:  # type: ignore[override]
        return self._trailing
