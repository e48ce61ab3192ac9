"""Client configuration: one frozen dataclass, every field documented, defaults named with
their unit (the same habit as the server's ``Settings``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

TIMEOUT_SECONDS_DEFAULT = 10.0
KEEPALIVE_TIME_MS_DEFAULT = 30_000
KEEPALIVE_TIMEOUT_MS_DEFAULT = 10_000
# The server refuses requests over 1 MiB by default; this bounds what we send anyway.
MAX_SEND_MESSAGE_BYTES_DEFAULT = 4 * 1024 * 1024
# A ListNotifications page of 1000 notifications with large bodies and metadata can
# exceed gRPC's 4 MiB receive default.
MAX_RECEIVE_MESSAGE_BYTES_DEFAULT = 64 * 1024 * 1024
RETRY_MAX_ATTEMPTS_DEFAULT = 5
RETRY_INITIAL_BACKOFF_SECONDS_DEFAULT = 0.1
RETRY_MAX_BACKOFF_SECONDS_DEFAULT = 3.0
RETRY_BACKOFF_MULTIPLIER_DEFAULT = 2.0

ChannelOption = tuple[str, str | int]


@dataclass(frozen=True)
class ClientConfig:
    """How to reach a UNS server and how patiently to talk to it.

    ``AsyncClient(ClientConfig(target="uns.example:443", api_key=KEY, tls=True))`` or, for
    the common case, ``AsyncClient("127.0.0.1:50051", api_key=KEY)``.
    """

    target: str
    """The server address, ``HOST:PORT`` (any gRPC target string works)."""

    api_key: str | None = field(default=None, repr=False)
    """The API key, sent as ``authorization: Bearer <api_key>`` on every call. ``None`` sends
    no credential (only useful with mTLS, where the certificate names the principal)."""

    tls: bool = False
    """Use TLS. Required by the server on anything but loopback (API keys are bearer
    secrets)."""

    root_certificates: bytes | None = None
    """PEM CA bundle to verify the server with; ``None`` uses the system roots."""

    client_certificate_chain: bytes | None = None
    """PEM certificate chain for mutual TLS; needs ``client_private_key`` and ``tls``."""

    client_private_key: bytes | None = field(default=None, repr=False)
    """PEM private key of ``client_certificate_chain``. Like ``api_key``, kept out of
    ``repr()``."""

    tls_server_name: str | None = None
    """Verify the server certificate against this name instead of the target's host
    (``grpc.ssl_target_name_override``); for tests and IP targets."""

    timeout_seconds: float | None = TIMEOUT_SECONDS_DEFAULT
    """Deadline of each unary call attempt, in seconds; ``None`` waits forever. A method's
    ``timeout=`` overrides it. WatchEvents streams never have a deadline."""

    keepalive_time_ms: int = KEEPALIVE_TIME_MS_DEFAULT
    """Ping the server after this many milliseconds without traffic, so a dead connection
    under a quiet WatchEvents stream is noticed. The server accepts pings every 10 s."""

    keepalive_timeout_ms: int = KEEPALIVE_TIMEOUT_MS_DEFAULT
    """Declare the connection dead when a ping is not answered within this many
    milliseconds; the call fails with UNAVAILABLE and ``watch()`` reconnects."""

    keepalive_permit_without_calls: bool = True
    """Keep pinging while no call is active, so the first call after a quiet period does
    not meet a half-open connection."""

    max_send_message_bytes: int = MAX_SEND_MESSAGE_BYTES_DEFAULT
    """Largest request the client will send, in bytes."""

    max_receive_message_bytes: int = MAX_RECEIVE_MESSAGE_BYTES_DEFAULT
    """Largest response the client will accept, in bytes."""

    retry_max_attempts: int = RETRY_MAX_ATTEMPTS_DEFAULT
    """Attempts per retried call, the first included (1 disables retries). Which calls
    retry which errors: see ``AsyncClient``."""

    retry_initial_backoff_seconds: float = RETRY_INITIAL_BACKOFF_SECONDS_DEFAULT
    """Backoff before the first retry, in seconds; it grows by ``retry_backoff_multiplier``
    per attempt, and each wait is jittered to between half and all of its value."""

    retry_max_backoff_seconds: float = RETRY_MAX_BACKOFF_SECONDS_DEFAULT
    """Cap of one backoff, in seconds. Also caps gRPC's own reconnect backoff, so a retry
    after a server restart is not refused by a channel still waiting to reconnect."""

    retry_backoff_multiplier: float = RETRY_BACKOFF_MULTIPLIER_DEFAULT
    """Growth factor of the backoff between attempts."""

    watch_max_reconnect_attempts: int | None = None
    """How many reconnections in a row ``watch()`` tries before it raises the last
    UNAVAILABLE error; ``None`` reconnects forever. The count resets whenever a response
    arrives."""

    channel_options: Sequence[ChannelOption] = ()
    """Extra gRPC channel arguments, appended after (and so overriding) the ones above."""

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError("target must be HOST:PORT")
        if self.retry_max_attempts < 1:
            raise ValueError("retry_max_attempts must be at least 1")
        if self.retry_initial_backoff_seconds <= 0 or self.retry_max_backoff_seconds <= 0:
            raise ValueError("retry backoff seconds must be positive")
        if self.retry_backoff_multiplier < 1:
            raise ValueError("retry_backoff_multiplier must be at least 1")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive or None")
        if (self.client_certificate_chain is None) != (self.client_private_key is None):
            raise ValueError("mutual TLS needs both client_certificate_chain and private key")
        if not self.tls and (
            self.client_certificate_chain is not None
            or self.root_certificates is not None
            or self.tls_server_name is not None
        ):
            raise ValueError("certificates and tls_server_name need tls=True")
        if self.watch_max_reconnect_attempts is not None and self.watch_max_reconnect_attempts < 1:
            raise ValueError("watch_max_reconnect_attempts must be at least 1 or None")

    def grpc_options(self) -> list[ChannelOption]:
        """The channel arguments this configuration stands for."""
        initial_backoff_ms = max(1, int(self.retry_initial_backoff_seconds * 1000))
        options: list[ChannelOption] = [
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_send_message_length", self.max_send_message_bytes),
            ("grpc.max_receive_message_length", self.max_receive_message_bytes),
            # gRPC's reconnect backoff starts at 1 s and grows to 120 s; while it waits,
            # calls fail fast with UNAVAILABLE. Keep it within our own retry backoff.
            # Not grpc.min_reconnect_backoff_ms: gRPC also takes it as the time a
            # connection has to finish its handshake (20 s by default), so 100 ms there
            # fails every connection to a server slower than that to send its SETTINGS.
            ("grpc.initial_reconnect_backoff_ms", initial_backoff_ms),
            (
                "grpc.max_reconnect_backoff_ms",
                max(initial_backoff_ms, int(self.retry_max_backoff_seconds * 1000)),
            ),
        ]
        if self.tls_server_name is not None:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        options.extend(self.channel_options)
        return options

    def auth_metadata(self) -> tuple[tuple[str, str], ...]:
        """The per-call metadata carrying the API key."""
        if self.api_key is None:
            return ()
        return (("authorization", f"Bearer {self.api_key}"),)
