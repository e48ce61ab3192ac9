"""An unexpected server failure answers INTERNAL with a reference — never the
exception's text, which may hold SQL and its parameters."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.server import RunningServer, send_request
from uns.v1 import notification_service_pb2 as pb

LEAK = "INSERT INTO uns_notifications VALUES ('planted-parameter')"


async def test_unexpected_failure_is_internal_with_a_reference(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError(LEAK)

    monkeypatch.setattr(server.app.intake, "send", broken)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await server.stub("alice").SendNotification(send_request())
    err = rich_error(exc.value)
    assert (err.code, err.reason, err.domain) == (grpc.StatusCode.INTERNAL, "INTERNAL", "uns.v1")
    assert "planted-parameter" not in err.message and "INSERT" not in err.message
    reference = err.metadata["reference"]
    assert reference in err.message
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(getattr(r, "error_reference", None) == reference for r in logged)

    # The server keeps serving.
    monkeypatch.undo()
    listed = await server.stub("alice").ListNotifications(pb.ListNotificationsRequest())
    assert list(listed.notifications) == []
