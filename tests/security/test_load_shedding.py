"""Load is shed, not absorbed (issue 20 item 3), each through gRPC:

- a principal over its request budget: RESOURCE_EXHAUSTED / RATE_LIMITED with a
  ``google.rpc.RetryInfo``; other principals keep their own budgets; per-principal
  overrides (``rate_limits``); a stream's start takes a token too;
- unary calls beyond ``max_concurrent_rpcs``: shed the same way (health is never shed);
- one principal's unary calls beyond ``max_concurrent_rpcs_per_principal``: shed the
  same way, while other principals are served;
- WatchEvents streams beyond ``watch_streams_max`` server-wide: TOO_MANY_STREAMS;
- key lookups that find nothing, per address: past the budget the address's unknown
  keys are refused before they are looked up, so they cost a bounded number of reads.

The slow-subscriber byte bound is in tests/api/test_watch_scale.py and test_watch_fanout.py.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import event

from tests.observability.helpers import scrape
from tests.security.rpcs import OK, Callers, Outcome, refusal
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns_server.settings import Settings, SettingsError

LIST = "NotificationService/ListNotifications"
WATCH = "NotificationService/WatchEvents"
LISTING = pb.ListNotificationsRequest()


def rate_limited(outcome: Outcome, limit: str) -> bool:
    return (
        outcome.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        and outcome.reason == "RATE_LIMITED"
        and outcome.error is not None
        and outcome.error.metadata.get("limit") == limit
        and outcome.error.retry_delay is not None
        and outcome.error.retry_delay > 0
    )


async def until_refused(call: Any, tries: int = 20) -> tuple[int, Outcome]:
    """Calls until one is refused: (calls answered OK before it, the refusal)."""
    for answered in range(tries):
        outcome = await call()
        if outcome.reason != OK:
            return answered, outcome
    raise AssertionError(f"never refused in {tries} calls")


async def test_a_principal_over_its_budget_is_told_when_to_retry(
    db_url: str, tmp_path: Path
) -> None:
    # One token every 2 s: the burst is spent long before one comes back.
    server = await start_server(
        db_url,
        tmp_path,
        dispatch_enabled=False,
        rate_limit_per_second=0.5,
        rate_limit_burst=3,
        rate_limits="bob=0, oscar=0.5/6",
    )
    try:
        callers = Callers(server)
        alice, bob, oscar = callers("alice"), callers("bob"), callers("oscar")
        answered, refused = await until_refused(
            lambda: alice.call(LIST, pb.ListNotificationsRequest())
        )
        assert answered >= 3  # the whole burst
        assert rate_limited(refused, "principal"), refused
        assert refused.error is not None
        assert refused.error.metadata["principal"] == "alice"
        assert refused.error.retry_delay == pytest.approx(2.0)
        # Every RPC draws on the same budget, a stream's start included.
        assert rate_limited(await alice.call(WATCH, pb.WatchEventsRequest()), "principal")
        sent = await alice.call("NotificationService/SendNotification", send_request())
        assert rate_limited(sent, "principal")
        # Others keep their own budgets: bob is unlimited, oscar has a larger burst.
        for _ in range(20):
            assert (await bob.call(LIST, pb.ListNotificationsRequest())).reason == OK
        answered, refused = await until_refused(
            lambda: oscar.call(LIST, pb.ListNotificationsRequest())
        )
        assert answered >= 6 and rate_limited(refused, "principal")
        # After the delay it was given, alice is served again.
        await asyncio.sleep(2.0)
        assert (await alice.call(LIST, pb.ListNotificationsRequest())).reason == OK
    finally:
        await server.stop()


async def test_calls_beyond_the_concurrency_cap_are_shed(db_url: str, tmp_path: Path) -> None:
    server = await start_server(
        db_url,
        tmp_path,
        dispatch_enabled=False,
        max_concurrent_rpcs=1,
        metrics_listen="127.0.0.1:0",
    )
    try:
        callers = Callers(server)
        alice = callers("alice")
        # With dispatch off, a send that waits for its first attempt holds its slot
        # until (nearly) its deadline.
        held = asyncio.create_task(
            alice.call(
                "NotificationService/SendNotification",
                send_request(wait_for_first_attempt=True),
                rpc_timeout=3.0,
            )
        )
        async with asyncio.timeout(10):
            while server.app.admission.in_flight < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        shed = await callers("bob").call(LIST, pb.ListNotificationsRequest())
        assert rate_limited(shed, "concurrent_rpcs"), shed
        # Operators see shedding in the metrics.
        shed_total = (await scrape(server)).value(
            "uns_requests_shed_total", limit="concurrent_rpcs"
        )
        assert shed_total == 1
        # Health checks are never shed (orchestrators must see the server alive).
        async with grpc.aio.insecure_channel(server.target) as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        # Streams have caps of their own and do not count here.
        assert (await callers("oscar").call(WATCH, pb.WatchEventsRequest())).reason == OK
        await held
        assert (await callers("bob").call(LIST, pb.ListNotificationsRequest())).reason == OK
    finally:
        await server.stop()


async def test_one_principal_cannot_hold_every_call_slot(db_url: str, tmp_path: Path) -> None:
    server = await start_server(
        db_url,
        tmp_path,
        dispatch_enabled=False,
        max_concurrent_rpcs=10,
        max_concurrent_rpcs_per_principal=2,
    )
    try:
        callers = Callers(server)
        alice = callers("alice")
        # With dispatch off, a send that waits for its first attempt holds its slot
        # until its deadline: alice holds both of hers.
        held = [
            asyncio.create_task(
                alice.call(
                    "NotificationService/SendNotification",
                    send_request(wait_for_first_attempt=True),
                    rpc_timeout=60.0,
                )
            )
            for _ in range(2)
        ]
        async with asyncio.timeout(30):
            while server.app.admission.in_flight_by_principal.get("alice", 0) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        # Another tenant is served at once, though the server has slots left only for it.
        assert (await callers("bob").call(LIST, LISTING)).reason == OK
        shed = await alice.call(LIST, LISTING)
        assert rate_limited(shed, "principal_concurrent_rpcs"), shed
        assert shed.error is not None
        assert shed.error.metadata["principal"] == "alice"
        assert shed.error.retry_delay == pytest.approx(1.0)
        for task in held:
            task.cancel()
        async with asyncio.timeout(30):
            while server.app.admission.in_flight_by_principal.get("alice", 0):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert (await alice.call(LIST, LISTING)).reason == OK
    finally:
        await server.stop()


async def test_watch_streams_are_capped_server_wide(db_url: str, tmp_path: Path) -> None:
    server = await start_server(
        db_url, tmp_path, dispatch_enabled=False, watch_streams_max=2, watch_streams_per_principal=5
    )
    streams: list[Any] = []
    try:
        callers = Callers(server)

        async def open_stream(who: str) -> Outcome:
            caller = callers(who)
            stream = caller.method(WATCH)(pb.WatchEventsRequest(), metadata=caller.metadata)
            try:
                await anext(aiter(stream))
            except grpc.aio.AioRpcError as err:
                return refusal(err)
            streams.append(stream)
            return Outcome(OK, grpc.StatusCode.OK)

        assert (await open_stream("alice")).reason == OK
        assert (await open_stream("alice")).reason == OK
        refused = await open_stream("bob")  # bob holds none: the server is full
        assert (refused.code, refused.reason) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "TOO_MANY_STREAMS",
        )
        assert refused.error is not None
        assert refused.error.metadata == {"scope": "server", "limit": "2"}
        streams.pop().cancel()
        async with asyncio.timeout(10):
            while (await open_stream("bob")).reason != OK:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        for stream in streams:
            stream.cancel()
        await server.stop()


def count_key_lookups(server: RunningServer, seen: list[str]) -> None:
    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "uns_api_keys" in statement:
            seen.append(statement)

    for engine in {server.app.db.reader, server.app.db.writer}:
        event.listen(engine.sync_engine, "before_cursor_execute", before)


async def test_unknown_keys_cost_a_bounded_number_of_database_reads(
    db_url: str, tmp_path: Path
) -> None:
    key_lookups: list[str] = []
    server = await start_server(
        db_url, tmp_path, auth_failure_burst=3, auth_failures_per_second=0.1
    )
    try:
        count_key_lookups(server, key_lookups)
        callers = Callers(server)
        outcomes = []
        for _ in range(30):  # a fresh unknown key each time: no cache can help
            forger = callers.raw(f"Bearer uns_{secrets.token_urlsafe(32)}")
            outcomes.append(await forger.call(LIST, pb.ListNotificationsRequest()))
        assert [o.reason for o in outcomes[:3]] == ["UNAUTHENTICATED"] * 3
        assert all(rate_limited(o, "failed_authentications") for o in outcomes[3:]), outcomes[3]
        assert outcomes[3].error is not None
        assert outcomes[3].error.retry_delay == pytest.approx(10.0)
        assert len(key_lookups) <= 3, key_lookups
        # Keys that need no lookup (the key file's, cached ones) are served meanwhile.
        assert (await callers("alice").call(LIST, LISTING)).reason == OK
    finally:
        await server.stop()


@pytest.mark.parametrize("value", ["alice", "alice=x", "=5", "alice=-1", "alice=5/0", "alice=5/x"])
def test_a_malformed_rate_limit_mapping_is_refused_at_start(value: str) -> None:
    with pytest.raises(SettingsError, match="rate_limits"):
        Settings.from_env({"UNS_RATE_LIMITS": value})


def test_rate_limit_overrides_read_from_the_environment() -> None:
    settings = Settings.from_env({"UNS_RATE_LIMITS": "a=10/20, b=0 ,c=1.5"})
    burst = settings.rate_limit_burst  # the default
    assert settings.principal_rate_limits() == {
        "a": (10.0, 20),
        "b": (0.0, burst),
        "c": (1.5, burst),
    }
