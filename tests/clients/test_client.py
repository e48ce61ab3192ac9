"""Send, simulate, get and list through both clients, against a real server (on SQLite)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import grpc
import pytest

from tests.clients.helpers import config_for, send_fields
from tests.support.server import RunningServer, send_request
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, Client

AsyncClients = Callable[[str], AsyncClient]
SyncClients = Callable[[str], Client]


async def test_async_send_get_list(server: RunningServer, async_client: AsyncClients) -> None:
    alice = async_client("alice")
    sent = await alice.send(
        **send_fields(
            idempotency_key="k1",
            intent=t.NOTIFICATION_INTENT_SAFETY,
            metadata={"host": "db-1", "used": 92, "tags": ["disk"]},
            correlation_id="inc-7",
            autonomy_mode="SUPERVISED",
            agent_id="agent-1",
            wait_for_first_attempt=True,
        )
    )
    assert isinstance(sent, pb.SendNotificationResponse)
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED
    assert list(sent.resolved_channels) == ["log"]

    got = await alice.get(sent.notification_id)
    assert isinstance(got, t.Notification)
    assert (got.id, got.principal, got.idempotency_key) == (sent.notification_id, "alice", "k1")
    assert got.intent == t.NOTIFICATION_INTENT_SAFETY
    assert got.autonomy_context.autonomy_mode == t.AUTONOMY_MODE_SUPERVISED
    assert got.autonomy_context.agent_id == "agent-1"
    assert dict(got.metadata) == {"host": "db-1", "used": 92.0, "tags": ["disk"]}
    assert got.correlation_id == "inc-7"

    again = await alice.send(
        **send_fields(
            idempotency_key="k1",
            intent="SAFETY",
            metadata={"host": "db-1", "used": 92, "tags": ["disk"]},
            correlation_id="inc-7",
            autonomy_mode=t.AUTONOMY_MODE_SUPERVISED,
            agent_id="agent-1",
        )
    )
    assert again.notification_id == sent.notification_id and again.idempotent_replay

    listed = [n async for n in alice.list()]
    assert [n.id for n in listed] == [sent.notification_id]


async def test_send_without_key_generates_one_per_call(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    first = await alice.send(**send_fields())
    second = await alice.send(**send_fields())
    assert first.notification_id != second.notification_id
    keys = {(await alice.get(r.notification_id)).idempotency_key for r in (first, second)}
    assert len(keys) == 2
    assert all(uuid.UUID(k).version == 4 for k in keys)


async def test_send_request_keeps_the_callers_message(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    request = send_request()
    sent = await alice.send_request(request)
    assert request.idempotency_key == ""  # a keyed copy was sent, the caller's is untouched
    assert (await alice.get(sent.notification_id)).idempotency_key
    keyed = send_request(idempotency_key="mine")
    assert (await alice.send_request(keyed)).notification_id == (
        await alice.send_request(keyed)
    ).notification_id


async def test_list_iterates_every_page(server: RunningServer, async_client: AsyncClients) -> None:
    alice = async_client("alice")
    ids = [
        (await alice.send(**send_fields(idempotency_key=f"p{i}"))).notification_id for i in range(5)
    ]
    seen = [n.id async for n in alice.list(filter='source = "disk-monitor"', page_size=2)]
    assert seen == list(reversed(ids))
    page = await alice.list_page(page_size=2)
    assert len(page.notifications) == 2 and page.next_page_token
    assert [n.id async for n in async_client("bob").list()] == []
    assert len([n async for n in async_client("oscar").list(page_size=1)]) == 5


async def test_simulate(server: RunningServer, async_client: AsyncClients) -> None:
    simulated = await async_client("alice").simulate(**send_fields(priority="HIGH"))
    assert list(simulated.resolved_channels) == ["log"]
    assert simulated.effective_policy.priority == t.PRIORITY_HIGH
    assert simulated.effective_policy.effective_hash
    assert simulated.outcome == pb.SIMULATE_OUTCOME_NEW
    assert [n async for n in async_client("oscar").list()] == []  # nothing written

    alice = async_client("alice")
    sent = await alice.send(**send_fields(idempotency_key="sim"))
    replay = await alice.simulate(**send_fields(idempotency_key="sim"))
    assert replay.outcome == pb.SIMULATE_OUTCOME_IDEMPOTENT_REPLAY
    assert replay.existing_notification_id == sent.notification_id


async def test_send_refuses_unknown_fields_and_enum_names(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    with pytest.raises(TypeError, match="colour"):
        await alice.send(**send_fields(colour="red"))
    with pytest.raises(ValueError, match="WARNING"):
        await alice.send(**send_fields(intent="LOUD"))
    assert [n async for n in async_client("oscar").list()] == []


async def test_sync_client_send_get_list(server: RunningServer, sync_client: SyncClients) -> None:
    alice = sync_client("alice")

    def work() -> tuple[pb.SendNotificationResponse, t.Notification, list[str], bool]:
        sent = alice.send(**send_fields(idempotency_key="s1", wait_for_first_attempt=True))
        replay = alice.send(**send_fields(idempotency_key="s1"))
        for i in range(3):
            alice.send(**send_fields(idempotency_key=f"s-more-{i}"))
        listed = [n.id for n in alice.list(page_size=2)]
        return sent, alice.get(sent.notification_id), listed, replay.idempotent_replay

    sent, got, listed, replayed = await asyncio.to_thread(work)
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED
    assert got.id == sent.notification_id and got.state == t.NOTIFICATION_STATE_DELIVERED
    assert len(listed) == 4 and listed[-1] == sent.notification_id
    assert replayed


async def test_sync_client_simulate_and_context_manager(server: RunningServer) -> None:
    def work() -> pb.SimulateResponse:
        with Client(config_for(server.target, "alice")) as alice:
            return alice.simulate(**send_fields(delivery_mode="BEST_EFFORT"))

    simulated = await asyncio.to_thread(work)
    assert simulated.delivery_mode == t.DELIVERY_MODE_BEST_EFFORT


async def test_async_context_manager_closes_channel(server: RunningServer) -> None:
    async with AsyncClient(config_for(server.target, "alice")) as alice:
        await alice.send(**send_fields())
    with pytest.raises(grpc.aio.UsageError):  # a closed client is a programming error
        await alice.get(str(uuid.uuid4()))


async def test_a_server_slow_to_say_hello_is_still_reached(server: RunningServer) -> None:
    """A server whose first bytes (its HTTP/2 SETTINGS) take a second to arrive, as over
    a slow link or from a busy host, is reached: the client gives a connection gRPC's
    own handshake time, not its 100 ms retry backoff."""

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        host, port = server.target.rsplit(":", 1)
        server_r, server_w = await asyncio.open_connection(host, int(port))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, delay: float) -> None:
            await asyncio.sleep(delay)
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
            w.close()

        await asyncio.gather(
            pipe(client_r, server_w, 0), pipe(server_r, client_w, 1.0), return_exceptions=True
        )

    slow = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = slow.sockets[0].getsockname()[1]
    try:
        async with AsyncClient(config_for(f"127.0.0.1:{port}", "alice")) as alice:
            sent = await alice.send(**send_fields())
            assert (await alice.get(sent.notification_id)).id == sent.notification_id
    finally:
        slow.close()
