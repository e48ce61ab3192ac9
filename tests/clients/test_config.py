"""ClientConfig: validation, channel options, and secrets kept out of repr()."""

from __future__ import annotations

import dataclasses
import random

import pytest

from uns_clients import ClientConfig
from uns_clients._retry import backoff_seconds


def test_defaults_suit_long_lived_streams() -> None:
    options = dict(ClientConfig("127.0.0.1:50051").grpc_options())
    assert options["grpc.keepalive_time_ms"] == 30_000
    assert options["grpc.keepalive_timeout_ms"] == 10_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    # gRPC's own reconnect backoff never outwaits our retries.
    assert options["grpc.max_reconnect_backoff_ms"] == 3_000


def test_channel_options_override_and_tls_name() -> None:
    config = ClientConfig(
        "10.0.0.1:443",
        tls=True,
        tls_server_name="uns.internal",
        channel_options=[("grpc.keepalive_time_ms", 60_000)],
    )
    options = config.grpc_options()
    assert dict(options)["grpc.keepalive_time_ms"] == 60_000
    assert ("grpc.ssl_target_name_override", "uns.internal") in options


def test_secrets_are_not_in_repr() -> None:
    config = ClientConfig(
        "h:1",
        api_key="uns_secret",
        tls=True,
        client_certificate_chain=b"CHAIN",
        client_private_key=b"PRIVATE",
    )
    text = repr(config)
    assert "uns_secret" not in text and "PRIVATE" not in text
    assert config.auth_metadata() == (("authorization", "Bearer uns_secret"),)
    assert ClientConfig("h:1").auth_metadata() == ()


def test_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ClientConfig("h:1").target = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "fields",
    [
        {"target": ""},
        {"retry_max_attempts": 0},
        {"retry_initial_backoff_seconds": 0},
        {"retry_backoff_multiplier": 0.5},
        {"timeout_seconds": 0},
        {"client_certificate_chain": b"cert", "tls": True},
        {"root_certificates": b"ca"},
        {"watch_max_reconnect_attempts": 0},
    ],
)
def test_invalid_configurations(fields: dict[str, object]) -> None:
    values: dict[str, object] = {"target": "h:1", **fields}
    with pytest.raises(ValueError):
        ClientConfig(**values)  # type: ignore[arg-type]


def test_backoff_grows_caps_and_jitters() -> None:
    config = ClientConfig("h:1", retry_initial_backoff_seconds=0.1, retry_max_backoff_seconds=1.0)
    rand = random.Random(7)
    for failures, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (30, 1.0)]:
        waits = [backoff_seconds(config, failures, rand) for _ in range(50)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert max(waits) - min(waits) > 0  # jittered
