"""Retries: which calls repeat on which errors (fake stubs, table-driven), and SendNotification
surviving a real server restart with the same idempotency key."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.clients.helpers import (
    FakeRpcError,
    config_for,
    eventually,
    send_fields,
    start_server_on,
)
from tests.support.server import start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, Client, DeadlineExceeded, Unavailable, UnsError

RESPONSES: dict[str, Any] = {
    "SendNotification": pb.SendNotificationResponse(notification_id="n1"),
    "Simulate": pb.SimulateResponse(),
    "GetNotification": pb.GetNotificationResponse(notification=t.Notification(id="n1")),
    "ListNotifications": pb.ListNotificationsResponse(),
    "Acknowledge": pb.AcknowledgeResponse(),
    "Replay": pb.ReplayResponse(),
    "ResolveFailure": pb.ResolveFailureResponse(),
}


class FakeMethod:
    """Fails ``failures`` times with ``code``, then answers; records every request."""

    def __init__(self, rpc: str, code: grpc.StatusCode, failures: int, *, aio: bool) -> None:
        self.rpc, self.code, self.failures, self.aio = rpc, code, failures, aio
        self.requests: list[Any] = []

    def __call__(self, request: Any, *, timeout: float | None = None, metadata: Any = None) -> Any:
        self.requests.append(request)
        failing = len(self.requests) <= self.failures
        if not self.aio:
            if failing:
                raise FakeRpcError(self.code)
            return RESPONSES[self.rpc]

        async def answer() -> Any:
            if failing:
                raise grpc.aio.AioRpcError(
                    self.code, grpc.aio.Metadata(), grpc.aio.Metadata(), "fake"
                )
            return RESPONSES[self.rpc]

        return answer()


class FakeStub:
    def __init__(self, code: grpc.StatusCode, failures: int, *, aio: bool) -> None:
        self.methods = {rpc: FakeMethod(rpc, code, failures, aio=aio) for rpc in RESPONSES}

    def __getattr__(self, rpc: str) -> FakeMethod:
        return self.methods[rpc]


# method -> (the rpc it calls, how to call it on either client)
CALLS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "send": ("SendNotification", lambda c: c.send(**send_fields())),
    "simulate": ("Simulate", lambda c: c.simulate(**send_fields())),
    "get": ("GetNotification", lambda c: c.get("n1")),
    "list_page": ("ListNotifications", lambda c: c.list_page()),
    "acknowledge": ("Acknowledge", lambda c: c.acknowledge("n1")),
    "replay": ("Replay", lambda c: c.replay("n1")),
    "resolve_failure": ("ResolveFailure", lambda c: c.resolve_failure("n1")),
}
# AIP-194, plus DEADLINE_EXCEEDED for SendNotification (its idempotency key makes it safe).
RETRIED_ON: dict[str, set[grpc.StatusCode]] = {
    "send": {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED},
    "simulate": {grpc.StatusCode.UNAVAILABLE},
    "get": {grpc.StatusCode.UNAVAILABLE},
    "list_page": {grpc.StatusCode.UNAVAILABLE},
    "acknowledge": {grpc.StatusCode.UNAVAILABLE},
    "replay": set(),
    "resolve_failure": set(),
}
ATTEMPTS = 3


async def call_with_fake(
    flavor: str, method: str, code: grpc.StatusCode, failures: int
) -> tuple[FakeMethod, Any]:
    """Run ``method`` on a client whose stub fails ``failures`` times; (fake, result or error)."""
    rpc, call = CALLS[method]
    config = config_for("127.0.0.1:1", retry_max_attempts=ATTEMPTS)
    stub = FakeStub(code, failures, aio=flavor == "async")
    outcome: Any
    if flavor == "async":
        async with AsyncClient(config) as aclient:
            aclient._stub = stub  # type: ignore[assignment]
            try:
                outcome = await call(aclient)
            except UnsError as exc:
                outcome = exc
    else:
        with Client(config) as client:
            client._stub = stub  # type: ignore[assignment]
            try:
                outcome = call(client)
            except UnsError as exc:
                outcome = exc
    return stub.methods[rpc], outcome


@pytest.mark.parametrize("flavor", ["async", "sync"])
@pytest.mark.parametrize("method", list(CALLS))
@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.ABORTED,
        # Without ErrorInfo RATE_LIMITED (e.g. grpc's own "message too large"): final.
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ],
)
async def test_which_calls_retry_which_errors(
    flavor: str, method: str, code: grpc.StatusCode
) -> None:
    fake, outcome = await call_with_fake(flavor, method, code, failures=100)
    retried = code in RETRIED_ON[method]
    assert len(fake.requests) == (ATTEMPTS if retried else 1)
    assert isinstance(outcome, UnsError) and outcome.code == code
    if code == grpc.StatusCode.UNAVAILABLE:
        assert isinstance(outcome, Unavailable)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        assert isinstance(outcome, DeadlineExceeded)


@pytest.mark.parametrize("flavor", ["async", "sync"])
async def test_send_retry_repeats_one_generated_key_and_succeeds(flavor: str) -> None:
    fake, outcome = await call_with_fake(
        flavor, "send", grpc.StatusCode.DEADLINE_EXCEEDED, failures=ATTEMPTS - 1
    )
    assert outcome == RESPONSES["SendNotification"]
    keys = {r.idempotency_key for r in fake.requests}
    assert len(fake.requests) == ATTEMPTS and len(keys) == 1
    assert uuid.UUID(keys.pop()).version == 4


# The real thing: a server that dies mid-call and comes back on the same port.


async def notifications(srv_target: str) -> list[t.Notification]:
    async with AsyncClient(config_for(srv_target, "oscar")) as oscar:
        return [n async for n in oscar.list()]


@pytest.mark.parametrize("flavor", ["async", "sync"])
async def test_send_survives_server_restart_with_the_same_key(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, flavor: str
) -> None:
    """The first attempt commits, then the server stops before answering (dispatch is off
    and the call waits for the first attempt). Retries meet a closed port until a new
    server starts on it; the retry must carry the key generated before the first attempt,
    so the new server answers the original notification as an idempotent replay."""
    caplog.set_level(logging.WARNING, logger="uns_clients")
    first = await start_server(db_url, tmp_path, dispatch_enabled=False)
    port = first.app.port
    config = config_for(
        first.target,
        retry_max_attempts=100,
        retry_initial_backoff_seconds=0.05,
        retry_max_backoff_seconds=0.25,
    )
    fields = send_fields(wait_for_first_attempt=True)
    call: Awaitable[pb.SendNotificationResponse]
    if flavor == "async":
        aclient = AsyncClient(config)
        call = aclient.send(**fields)
    else:
        client = Client(config)
        call = asyncio.to_thread(lambda: client.send(**fields))
    sending = asyncio.ensure_future(call)
    running = [first]
    try:
        committed = await eventually(lambda: notifications(first.target))
        assert not sending.done()  # still waiting for a first attempt that cannot happen
        await running.pop().stop()
        await asyncio.sleep(0.5)  # retries now hit a closed port
        assert not sending.done()
        running.append(await start_server_on(db_url, tmp_path, port))
        reply = await asyncio.wait_for(sending, 30)
        after = await notifications(running[0].target)
    finally:
        if not sending.done():
            sending.cancel()
        if flavor == "async":
            await aclient.close()
        else:
            client.close()
        for srv in running:
            await srv.stop()

    assert [n.id for n in after] == [committed[0].id]  # exactly one notification
    assert reply.notification_id == committed[0].id
    assert reply.idempotent_replay
    key = committed[0].idempotency_key
    assert uuid.UUID(key).version == 4
    retries = [r for r in caplog.records if r.name == "uns_clients" and "retrying" in r.message]
    assert len(retries) >= 2
    assert {getattr(r, "idempotency_key", None) for r in retries} == {key}
    assert {getattr(r, "reason", None) for r in retries} == {"UNAVAILABLE"}


@pytest.mark.parametrize("flavor", ["async", "sync"])
async def test_rate_limited_calls_wait_the_delay_the_server_gives(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, flavor: str
) -> None:
    """Over its budget, a principal is answered RATE_LIMITED with a RetryInfo; the client
    waits at least that long and retries, even Replay (the server did nothing)."""
    caplog.set_level(logging.WARNING, logger="uns_clients")
    server = await start_server(
        db_url, tmp_path, dispatch_enabled=False, rate_limit_per_second=4, rate_limit_burst=1
    )
    config = config_for(server.target, "oscar", retry_max_attempts=20)
    unknown = str(uuid.uuid4())
    outcomes: list[Any] = []
    try:
        for _ in range(3):  # the first takes the only token; the others must wait for one
            try:
                if flavor == "async":
                    async with AsyncClient(config) as aclient:
                        outcomes.append(await aclient.replay(unknown))
                else:
                    with Client(config) as client:
                        outcomes.append(await asyncio.to_thread(client.replay, unknown))
            except UnsError as exc:
                outcomes.append(exc)
    finally:
        await server.stop()
    assert [o.reason for o in outcomes] == ["NOT_FOUND"] * 3  # never RATE_LIMITED
    retries = [r for r in caplog.records if r.name == "uns_clients" and "retrying" in r.message]
    assert retries and {getattr(r, "reason", None) for r in retries} == {"RATE_LIMITED"}
    for record in retries:  # "retrying in N.NNs": at least the server's 1 / 4 s
        waited = float(record.getMessage().split("retrying in ")[1].split("s")[0])
        assert waited >= 0.25
