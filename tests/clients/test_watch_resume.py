"""EventStream's resume logic against a scripted stub: cursors from events and heartbeats,
reconnect requests, duplicate suppression, and which errors end the iteration."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from tests.clients.helpers import config_for
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, HistoryCompacted, PermissionDenied, Unavailable, UnsError

Script = list[Any]  # responses, then an AioRpcError/StatusCode or EOF ends the call


def event(sequence: int) -> pb.WatchEventsResponse:
    return pb.WatchEventsResponse(
        event=t.Event(sequence=sequence, notification_id="n", kind=t.EVENT_KIND_ACCEPTED)
    )


def heartbeat(sequence: int) -> pb.WatchEventsResponse:
    return pb.WatchEventsResponse(heartbeat=pb.Heartbeat(high_water_sequence=sequence))


def failure(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "scripted")


class FakeCall:
    def __init__(self, script: Script) -> None:
        self.script = list(script)
        self.cancelled = False

    async def read(self) -> Any:
        if not self.script:
            return grpc.aio.EOF
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class FakeWatchStub:
    def __init__(self, *scripts: Script) -> None:
        self.scripts = list(scripts)
        self.requests: list[pb.WatchEventsRequest] = []

    def WatchEvents(self, request: pb.WatchEventsRequest, **_: Any) -> FakeCall:
        self.requests.append(request)
        return FakeCall(
            self.scripts.pop(0) if self.scripts else [failure(grpc.StatusCode.UNAVAILABLE)]
        )


async def run(stub: FakeWatchStub, count: int, **watch: Any) -> tuple[list[int], Any]:
    config = config_for("127.0.0.1:1", retry_initial_backoff_seconds=0.001)
    async with AsyncClient(config) as client:
        client._stub = stub  # type: ignore[assignment]
        stream = client.watch(**watch)
        sequences = [(await anext(stream)).sequence for _ in range(count)]
        return sequences, stream


async def test_resumes_from_last_event_and_drops_duplicates() -> None:
    stub = FakeWatchStub(
        [event(5), event(6), failure(grpc.StatusCode.UNAVAILABLE)],
        [event(6), event(7)],  # a server repeating 6 is ignored
    )
    sequences, stream = await run(stub, 2 + 1, after_sequence=4, notification_ids=["n"])
    assert sequences == [5, 6, 7]
    assert [r.after_sequence for r in stub.requests] == [4, 6]
    assert all(list(r.notification_ids) == ["n"] for r in stub.requests)
    assert stream.cursor == 7 and stream.reconnects == 1


async def test_heartbeat_advances_the_cursor_and_eof_reconnects() -> None:
    stub = FakeWatchStub(
        [heartbeat(3), event(4), heartbeat(40)],  # then EOF: an unexpected clean end
        [failure(grpc.StatusCode.UNAVAILABLE)],  # e.g. the server still restarting
        [heartbeat(41), event(42)],
    )
    sequences, stream = await run(stub, 2, replay_history=True)
    assert sequences == [4, 42]
    assert [r.after_sequence for r in stub.requests] == [0, 40, 40]
    assert all(r.replay_history for r in stub.requests)
    assert stream.cursor == 42 and stream.reconnects == 2


def compacted() -> grpc.aio.AioRpcError:
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason="HISTORY_COMPACTED", domain="uns.v1"))
    code = grpc.StatusCode.OUT_OF_RANGE
    status = status_pb2.Status(code=code.value[0], message="too old", details=[info])
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, "too old")


@pytest.mark.parametrize(
    ("rpc_error", "error"),
    [
        (compacted(), HistoryCompacted),
        (failure(grpc.StatusCode.PERMISSION_DENIED), PermissionDenied),
        (failure(grpc.StatusCode.INTERNAL), UnsError),
    ],
)
async def test_other_errors_end_the_iteration(
    rpc_error: grpc.aio.AioRpcError, error: type[UnsError]
) -> None:
    stub = FakeWatchStub([event(1), rpc_error])
    with pytest.raises(error):
        await run(stub, 2)
    assert len(stub.requests) == 1


async def test_gives_up_after_max_reconnect_attempts() -> None:
    stub = FakeWatchStub()  # every call fails with UNAVAILABLE
    async with AsyncClient(
        config_for(
            "127.0.0.1:1", retry_initial_backoff_seconds=0.001, watch_max_reconnect_attempts=2
        )
    ) as client:
        client._stub = stub  # type: ignore[assignment]
        with pytest.raises(Unavailable):
            await anext(client.watch())
    assert len(stub.requests) == 3  # the first try and two reconnections
