"""Fixtures for the channel adapters: a real loopback HTTP receiver and the server's client."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

import pytest

from tests.support.http_receiver import HttpReceiver
from uns_server.channels.base import ChannelResult, OutboundMessage
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.registry import default_http_client

# Planted in every credential slot; it must never come back out.
PLANTED_SECRET = "PLANTED-s3cr3t-value-7f9c2a"


def make_message(**overrides: Any) -> OutboundMessage:
    values: dict[str, Any] = {
        "notification_id": "0b5c2f8e-1d7a-4c39-9a51-3f0e2b7c9d11",
        "notification_type": "robot.fault",
        "intent": "WARNING",
        "title": "Arm 3 stalled",
        "message": "Joint 2 over torque <@here> & co",
        "source": "cell-7",
        "priority": "HIGH",
        "correlation_id": "corr-42",
        "metadata": {"cell": 7, "tags": ["arm", "torque"]},
        "attempt": 1,
        "idempotency_token": "0b5c2f8e-1d7a-4c39-9a51-3f0e2b7c9d11:ops",
    }
    values.update(overrides)
    return OutboundMessage(**values)


def assert_secret_absent(
    result: ChannelResult, caplog: pytest.LogCaptureFixture, *secrets: str
) -> None:
    """No secret in the result (any field) nor in any captured log record."""
    rendered = repr(asdict(result))
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records) + caplog.text
    for secret in secrets or (PLANTED_SECRET,):
        assert secret not in rendered
        assert secret not in logged


@pytest.fixture
async def receiver() -> AsyncIterator[HttpReceiver]:
    async with HttpReceiver() as rx:
        yield rx


@pytest.fixture
async def http_client() -> AsyncIterator[OutboundClient]:
    # The server's client. trust_env=False: a proxy configured in the environment must
    # not intercept loopback.
    async with default_http_client(trust_env=False) as client:
        yield client


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture everything, the HTTP library's logs included."""
    caplog.set_level(logging.DEBUG)
    return caplog
