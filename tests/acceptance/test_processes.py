"""``uns-server --processes N``: one supervisor, N serving children on one port and one
PostgreSQL, as real processes on loopback. Both children answer; a child killed with
SIGKILL is restarted and nothing accepted is lost; fencing and the gap-free watch hold
across them; request budgets are per process, as documented; SIGTERM drains all and
exits 0; an unrelated server still cannot take the port; SQLite refuses more than one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.api.test_lifecycle import SERVING, ServerProcess, sqlite_url
from tests.conftest import PostgresDatabases
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from tests.support.postgres import free_port
from tests.support.server import KEYS, send_request, write_key_file
from tests.support.watching import positioned
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.settings import Settings, SettingsError

SEND = "/uns.v1.NotificationService/SendNotification"
NTYPE = "ops.procs"
POLICY = f"""\
notification_type: {NTYPE}
spec: {{channels: [hook], delivery_mode: GUARANTEED, require_ack: false, max_attempts: 5}}
"""
DEADLINE = 90.0
PG_URL = "postgresql+asyncpg://uns@127.0.0.1:5432/uns"


class Supervised(ServerProcess):
    """``uns-server --processes N`` with its JSON logs (the children share its stderr)."""

    def started(self) -> dict[int, int]:
        """Child index -> pid of the process the supervisor last started in that slot."""
        pids: dict[int, int] = {}
        for entry in self.logs():
            if entry.get("logger") == "uns.supervisor" and entry["message"] == "child started":
                pids[int(entry["child"])] = int(entry["pid"])
        return pids

    def ready_count(self, child: int) -> int:
        return sum(
            1
            for e in self.logs()
            if e.get("child") == child and e["message"].startswith("ready: database")
        )

    async def wait_ready(self, processes: int, times: int = 1) -> dict[int, int]:
        """Until every child has been ready, child 0 ``times`` times; their pids."""
        end = time.monotonic() + DEADLINE
        wanted = {c: times if c == 0 else 1 for c in range(processes)}
        while any(self.ready_count(c) < n for c, n in wanted.items()):
            assert self.proc.poll() is None, self.stderr()
            assert time.monotonic() < end, f"children never ready:\n{self.stderr()}"
            await asyncio.sleep(0.1)
        await self.wait_health(SERVING)
        return self.started()

    async def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return await self.wait_exit(DEADLINE)

    def cleanup(self) -> None:
        """SIGTERM and wait (the children drain), SIGKILL only if that hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(DEADLINE)
        self.kill()


def channel(target: str) -> grpc.aio.Channel:
    """A channel on a TCP connection of its own (gRPC shares connections between
    channels to one target otherwise): the kernel picks a child for each."""
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


def auth(who: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {KEYS[who]}"),)


async def send_once(target: str, key: str, who: str = "alice", **fields: Any) -> str:
    """One SendNotification on a fresh connection; its notification id."""
    async with channel(target) as chan:
        reply = await pb_grpc.NotificationServiceStub(chan).SendNotification(
            send_request(idempotency_key=key, **fields), metadata=auth(who), timeout=30
        )
    return str(reply.notification_id)


async def send_until_accepted(target: str, key: str, **fields: Any) -> str:
    """Retries what a dying child left unanswered, with the same key (idempotent)."""
    end = time.monotonic() + DEADLINE
    while True:
        try:
            return await send_once(target, key, **fields)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > end:
                raise
            await asyncio.sleep(0.1)


def metrics_ports() -> int:
    """A port P with P+1 free too: child i serves metrics on P+i. Below the ephemeral
    range: the children bind them seconds after this looks, and in between any outgoing
    connection or port-0 listener of a neighbouring test could take one from that range
    (a CI run lost a child to it)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(10_000, low - 2)
        if all(_bindable(p) for p in (port, port + 1)):
            return port
    raise AssertionError("no two consecutive free ports")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.status)


def sends_counted(port: int) -> float:
    """SendNotification calls answered OK by the child whose metrics are on ``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        counted = line.startswith("uns_rpc_server_duration_seconds_count{") and SEND in line
        if counted and 'code="OK"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def wait_until(predicate: Callable[[], bool], what: str, within: float = DEADLINE) -> None:
    end = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def history(target: str, ids: list[str]) -> list[t.Event]:
    """Every event of ``ids`` committed so far, replayed through ``target``."""
    async with channel(target) as chan:
        call = pb_grpc.NotificationServiceStub(chan).WatchEvents(
            pb.WatchEventsRequest(replay_history=True, notification_ids=ids),
            metadata=auth("oscar"),
        )
        try:
            return await positioned(call)
        finally:
            call.cancel()


@pytest.fixture
async def receiver() -> AsyncIterator[HttpReceiver]:
    async with HttpReceiver() as rx:
        yield rx


async def webhook_setup(url: str, tmp_path: Path, receiver: HttpReceiver) -> list[str]:
    """The ``NTYPE`` policy on the webhook channel ``hook``; the server arguments."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    admin = [sys.executable, "-m", "uns_server.cli.admin", "--database-url", url]
    await asyncio.to_thread(
        subprocess.run,
        [*admin, "policies", "put", "--file", str(policy), "--activate"],
        check=True,
        capture_output=True,
    )
    channels = tmp_path / "channels.yaml"
    channels.write_text(f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n  secret: s\n")
    return ["--channels-file", str(channels)]


def server_args(url: str, tmp_path: Path, processes: int = 2) -> list[str]:
    return [
        "--database-url",
        url,
        "--api-keys-file",
        str(write_key_file(tmp_path)),
        "--log-format",
        "json",
        "--processes",
        str(processes),
    ]


async def running(tmp_path: Path, *args: str) -> Supervised:
    server = Supervised(tmp_path, *args)
    await server.wait_ready(int(args[args.index("--processes") + 1]))
    return server


async def test_two_children_answer_on_one_port_and_sigterm_drains_both(
    postgres: PostgresDatabases, tmp_path: Path
) -> None:
    url = await postgres.new()
    metrics = metrics_ports()
    server = await running(
        tmp_path,
        *server_args(url, tmp_path),
        *("--metrics-listen", f"127.0.0.1:{metrics}", "--http-listen", "127.0.0.1:0"),
    )
    try:
        pids = server.started()
        assert sorted(pids) == [0, 1] and len(set(pids.values())) == 2
        assert server.proc.pid not in pids.values()  # the supervisor serves nothing
        listening = [e for e in server.logs() if e["message"] == "listening"]
        assert {e["port"] for e in listening} == {server.port}
        assert {e["child"] for e in listening} == {0, 1}
        http = [e for e in server.logs() if e["message"] == "http listening"]
        assert {e["child"] for e in http} == {0, 1}
        (http_port,) = {e["port"] for e in http}  # HOST:0 became one port for both
        for _ in range(4):  # a connection each
            assert http_status(f"http://127.0.0.1:{http_port}/readyz") == 200

        sends = 40
        ids = await asyncio.gather(*(send_once(server.target, f"s{i}") for i in range(sends)))
        assert len(set(ids)) == sends
        counted = [sends_counted(metrics), sends_counted(metrics + 1)]
        assert sum(counted) == sends and all(counted), counted  # both children answered

        assert await server.terminate() == 0
        for pid in pids.values():  # every child drained and exited
            await wait_until(lambda p=pid: not _alive(p), f"child {pid} to exit", 30)
        draining = [e for e in server.logs() if e["message"] == "shutting down"]
        assert {e.get("child") for e in draining} == {0, 1}
    finally:
        server.cleanup()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_killed_child_is_restarted_and_nothing_accepted_is_lost(
    postgres: PostgresDatabases, tmp_path: Path, receiver: HttpReceiver
) -> None:
    """SIGKILL one child while notifications are being sent and delivered: the
    supervisor starts a new one in its slot, producers retry what the kill left
    unanswered, and every accepted notification reaches the webhook: once, or again
    only in an attempt flagged as recovering the killed child's lease."""
    url = await postgres.new()
    receiver.default = Reply(delay_seconds=0.2)  # attempts stay in flight a while
    args = [*server_args(url, tmp_path), *await webhook_setup(url, tmp_path, receiver)]
    server = await running(tmp_path, *args, "--lease-seconds", "3", "--idle-poll-seconds", "0.5")
    try:
        before = server.started()
        accepted: dict[str, str] = {}

        async def produce(prefix: str, count: int) -> None:
            async def one(i: int) -> None:
                key = f"{prefix}{i}"
                accepted[key] = await send_until_accepted(
                    server.target, key, notification_type=NTYPE
                )

            await asyncio.gather(*(one(i) for i in range(count)))

        first = asyncio.create_task(produce("a", 60))
        await wait_until(lambda: len(receiver.requests) >= 10, "deliveries under way")
        os.kill(before[0], signal.SIGKILL)
        await first
        await server.wait_ready(2, times=2)  # child 0 started again, and ready
        after = server.started()
        assert after[0] != before[0] and after[1] == before[1]
        restarts = [e for e in server.logs() if e["message"] == "child exited; restarting"]
        assert [(e["child"], e["pid"], e["exit_code"]) for e in restarts] == [
            (0, before[0], -signal.SIGKILL)
        ]
        await produce("b", 20)  # both children serve again

        ids = set(accepted.values())
        assert len(ids) == 80

        def delivered() -> set[str]:
            return {r.headers["webhook-id"].split(":")[0] for r in receiver.requests}

        await wait_until(lambda: ids <= delivered(), "every accepted notification delivered")
        events = await _replayed_until_delivered(server.target, sorted(ids))
        recovered = {
            e.notification_id
            for e in events
            if e.kind == t.EVENT_KIND_ATTEMPT_STARTED
            and e.payload["recovery_may_repeat_provider_effect"]
        }
        done = {
            e.notification_id
            for e in events
            if e.kind == t.EVENT_KIND_DELIVERY_RESULT and e.payload["status"] == "DELIVERED"
        }
        assert done == ids
        per_id = Counter(r.headers["webhook-id"].split(":")[0] for r in receiver.requests)
        repeated = {i for i, n in per_id.items() if n > 1}
        assert repeated <= recovered, "a repeat not explained by the killed child's lease"
        assert await server.terminate() == 0
    finally:
        server.cleanup()


async def test_fencing_holds_across_children(
    postgres: PostgresDatabases, tmp_path: Path, receiver: HttpReceiver
) -> None:
    """A child frozen (SIGSTOP) with attempts in flight outlives their leases; its
    sibling takes them over and delivers them. Thawed, the frozen child's late
    settlements are fenced: LEASE_LOST each, every notification DELIVERED once. The
    supervisor restarts nothing: a stopped child is not a dead one."""
    url = await postgres.new()

    def slow_first_attempts(request: RecordedRequest) -> Reply:
        first = request.headers["webhook-id"].endswith(":1")
        # Long enough that the freeze finds attempts in flight on a busy machine, short
        # of the cancellation at 0.8 x lease_seconds.
        return Reply(delay_seconds=4.0 if first else 0.0)

    receiver.responder = slow_first_attempts
    metrics = metrics_ports()
    args = [*server_args(url, tmp_path), *await webhook_setup(url, tmp_path, receiver)]
    server = await running(
        tmp_path,
        *args,
        *("--lease-seconds", "6", "--idle-poll-seconds", "0.5"),
        *("--metrics-listen", f"127.0.0.1:{metrics}"),
    )
    try:
        pids = server.started()
        sends = 24
        ids = await asyncio.gather(
            *(send_once(server.target, f"f{i}", notification_type=NTYPE) for i in range(sends))
        )
        # Each child leases what it accepted to its own dispatcher (free slots).
        frozen_accepted = sends_counted(metrics)
        assert frozen_accepted and sends_counted(metrics + 1)
        await receiver.wait_for_requests(sends, within_seconds=30)  # all in flight now
        os.kill(pids[0], signal.SIGSTOP)
        try:
            await receiver.wait_for_requests(sends + 1, within_seconds=30)  # a takeover
            await asyncio.sleep(1.0)
        finally:
            os.kill(pids[0], signal.SIGCONT)

        async def settled() -> list[t.Event]:
            return await history(server.target, list(ids))

        end = time.monotonic() + DEADLINE
        while True:
            events = await settled()
            lost = [e for e in events if e.kind == t.EVENT_KIND_LEASE_LOST]
            recovered = [
                e
                for e in events
                if e.kind == t.EVENT_KIND_ATTEMPT_STARTED
                and e.payload["recovery_may_repeat_provider_effect"]
            ]
            results = Counter(
                e.notification_id
                for e in events
                if e.kind == t.EVENT_KIND_DELIVERY_RESULT and e.payload["status"] == "DELIVERED"
            )
            if lost and len(lost) == len(recovered) and set(results) == set(ids):
                break
            assert time.monotonic() < end, f"LEASE_LOST {len(lost)}, recovered {len(recovered)}"
            await asyncio.sleep(0.5)
        assert results == dict.fromkeys(ids, 1)  # every one DELIVERED, none twice
        assert len(lost) <= frozen_accepted
        assert server.started() == pids  # nothing was restarted
        assert await server.terminate() == 0
    finally:
        server.cleanup()


async def test_a_watch_on_one_child_sees_every_event_made_through_the_other(
    postgres: PostgresDatabases, tmp_path: Path
) -> None:
    """Gap-free across processes: one live WatchEvents stream, on whichever child its
    connection landed, sees every event committed through either child, in sequence
    order, exactly as a replay of the table reads them afterwards."""
    url = await postgres.new()
    metrics = metrics_ports()
    server = await running(
        tmp_path, *server_args(url, tmp_path), "--metrics-listen", f"127.0.0.1:{metrics}"
    )
    try:
        async with channel(server.target) as chan:
            live = pb_grpc.NotificationServiceStub(chan).WatchEvents(
                pb.WatchEventsRequest(), metadata=auth("oscar")
            )
            await positioned(live)  # subscribed: everything from here on is sent
            sends = 30
            ids = await asyncio.gather(*(send_once(server.target, f"w{i}") for i in range(sends)))
            assert sends_counted(metrics) and sends_counted(metrics + 1)  # both produced
            expected = await _replayed_until_delivered(server.target, list(ids))
            seen: list[t.Event] = []
            async with asyncio.timeout(DEADLINE):
                async for response in live:
                    if response.HasField("event"):
                        seen.append(response.event)
                        if len(seen) == len(expected):
                            break
            live.cancel()
        assert [e.sequence for e in seen] == [e.sequence for e in expected]
        assert [e.sequence for e in seen] == sorted(e.sequence for e in seen)
        assert {e.notification_id for e in seen} == set(ids)
    finally:
        server.cleanup()


async def _replayed_until_delivered(target: str, ids: list[str]) -> list[t.Event]:
    """The table's events of ``ids`` once each of them has its DELIVERY_RESULT."""
    end = time.monotonic() + DEADLINE
    while True:
        events = await history(target, ids)
        done = {e.notification_id for e in events if e.kind == t.EVENT_KIND_DELIVERY_RESULT}
        if done == set(ids):
            return events
        assert time.monotonic() < end, "not every notification was delivered"
        await asyncio.sleep(0.2)


async def test_request_budgets_are_per_process(postgres: PostgresDatabases, tmp_path: Path) -> None:
    """As documented: each child keeps its own budget per principal. One connection,
    served by one child, gets one burst; spread over many connections, a principal
    gets one burst from each child (N times the budget on the host)."""
    url = await postgres.new()
    burst = 3
    server = await running(
        tmp_path,
        *server_args(url, tmp_path),
        *("--rate-limit-per-second", "0.001", "--rate-limit-burst", str(burst)),
    )
    try:
        async with channel(server.target) as chan:
            stub = pb_grpc.NotificationServiceStub(chan)
            codes = []
            for i in range(burst + 2):
                try:
                    await stub.SendNotification(
                        send_request(idempotency_key=f"r{i}"), metadata=auth("bob"), timeout=30
                    )
                    codes.append("OK")
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code().name)
        assert codes == ["OK"] * burst + ["RESOURCE_EXHAUSTED"] * 2

        async def try_once(i: int) -> bool:
            try:
                await send_once(server.target, f"spread{i}")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                return False
            return True

        accepted = [await try_once(i) for i in range(40)]  # one connection each
        assert sum(accepted) == 2 * burst  # alice: one burst in each of the 2 children
        assert await server.terminate() == 0
    finally:
        server.cleanup()


async def test_the_port_stays_refused_to_unrelated_servers(tmp_path: Path) -> None:
    """The children share the port on purpose; a plain server, or a second supervisor,
    started on it still exits 2 with the one-server-per-address message. (The database
    is unreachable: the children listen anyway, NOT_SERVING, and drain on SIGTERM.)"""
    nowhere = f"postgresql+asyncpg://uns@127.0.0.1:{free_port()}/uns"
    (tmp_path / "a").mkdir()
    first = Supervised(
        tmp_path / "a", *server_args(nowhere, tmp_path / "a"), "--db-retry-seconds", "0.5"
    )
    try:
        await first.wait_log(lambda e: e["message"] == "listening" and e.get("child") == 1)
        await first.wait_log(lambda e: e["message"] == "listening" and e.get("child") == 0)
        listen = first.target
        for name, processes in (("plain", 1), ("second", 2)):
            (tmp_path / name).mkdir()
            other = Supervised(
                tmp_path / name,
                *server_args(nowhere, tmp_path / name, processes),
                "--listen",
                listen,
            )
            try:
                assert await other.wait_exit() == 2
                err = other.stderr()
                assert f"cannot listen on {listen}: the address is already in use" in err
                assert "--reuse-port" in err and "Traceback" not in err
            finally:
                other.kill()
        assert first.proc.poll() is None
        assert first.started().keys() == {0, 1}  # nothing restarted
        assert await first.terminate() == 0
    finally:
        first.cleanup()


async def test_sqlite_refuses_more_than_one_process(tmp_path: Path) -> None:
    server = Supervised(
        tmp_path,
        *server_args(sqlite_url(tmp_path / "uns.db"), tmp_path),
    )
    try:
        assert await server.wait_exit() == 2
        err = server.stderr()
        assert "--processes 2 needs PostgreSQL" in err and "Traceback" not in err
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"processes": 0}, "processes must be at least 1"),
        ({"processes": 2}, "--processes 2 needs PostgreSQL"),
        (
            {"processes": 3, "metrics_listen": "127.0.0.1:65534", "database_url": PG_URL},
            "process i serves metrics on port PORT+i, past 65535",
        ),
    ],
)
def test_settings_refuse_what_cannot_work(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        Settings.from_env({}, **overrides)
    fine = {"processes": 3, "metrics_listen": "127.0.0.1:65533", "database_url": PG_URL}
    assert Settings.from_env({}, **fine).processes == 3


async def test_children_drain_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    """SIGKILL leaves the supervisor no time to stop anything: its children see the
    pipe it kept open close, and drain by themselves instead of serving on unsupervised."""
    nowhere = f"postgresql+asyncpg://uns@127.0.0.1:{free_port()}/uns"
    server = Supervised(tmp_path, *server_args(nowhere, tmp_path), "--db-retry-seconds", "0.5")
    try:
        for child in (0, 1):
            await server.wait_log(
                lambda e, c=child: e["message"] == "listening" and e["child"] == c
            )
        pids = server.started()
        server.proc.kill()
        for child, pid in pids.items():
            await wait_until(lambda p=pid: not _alive(p), f"child {child} to exit", 60)
        gone = [e for e in server.logs() if e["message"] == "the supervisor is gone: draining"]
        assert {e["child"] for e in gone} == {0, 1}
    finally:
        server.cleanup()


async def test_a_child_that_cannot_start_stops_all_with_status_2(tmp_path: Path) -> None:
    """Exit status 2 is a configuration that can never work (here child 1's metrics
    port, PORT+1, is taken): restarting would loop, so the supervisor stops every child
    and exits 2 itself, as a single server would."""
    nowhere = f"postgresql+asyncpg://uns@127.0.0.1:{free_port()}/uns"
    metrics = metrics_ports()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", metrics + 1))
        taken.listen()
        server = Supervised(
            tmp_path,
            *server_args(nowhere, tmp_path),
            *("--metrics-listen", f"127.0.0.1:{metrics}"),
        )
        try:
            assert await server.wait_exit(DEADLINE) == 2
            err = server.stderr()
            assert f"cannot listen on 127.0.0.1:{metrics + 1} for metrics" in err
            assert "a child cannot start (exit status 2, see its message): stopping all" in err
            assert "child exited; restarting" not in err
            for pid in server.started().values():
                await wait_until(lambda p=pid: not _alive(p), f"child {pid} to exit", 60)
        finally:
            server.cleanup()
