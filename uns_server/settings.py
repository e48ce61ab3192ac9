"""Server settings: one frozen dataclass, read once from an injectable mapping.

Every setting has an environment variable (``UNS_*``) and a command-line flag
(``uns-server --help``); flags win over the environment. Defaults carry their unit
in the name and give the zero-setup quickstart: SQLite file, loopback, ``log``
channel (``scripts/serve`` also makes it the default channel of types without a
policy).

Size: every setting, its default with its unit and why it exists, in one dataclass read
side by side (the flags, groups and help are ``cli/server_help.py``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

DATABASE_URL_DEFAULT = "sqlite+aiosqlite:///./uns.db"
LISTEN_DEFAULT = "127.0.0.1:50051"
DISPATCH_CONCURRENCY_DEFAULT = 32
DISPATCH_BATCH_SIZE_DEFAULT = 16
DISPATCH_CHANNEL_CONCURRENCY_DEFAULT = 16
DISPATCH_MAX_THROTTLE_DEFERRALS_DEFAULT = 10
LEASE_SECONDS_DEFAULT = 60.0
IDLE_POLL_SECONDS_DEFAULT = 5.0
EXPIRY_POLL_SECONDS_DEFAULT = 5.0
WATCH_HEARTBEAT_SECONDS_DEFAULT = 10.0
WATCH_QUEUE_MAX_DEFAULT = 10_000
WATCH_STREAMS_PER_PRINCIPAL_DEFAULT = 100
WATCH_STREAMS_MAX_DEFAULT = 5_000
WATCH_QUEUE_MAX_BYTES_DEFAULT = 8 * 1024 * 1024
RATE_LIMIT_PER_SECOND_DEFAULT = 200.0
RATE_LIMIT_BURST_DEFAULT = 1000  # a full BatchSendNotifications of an idle producer
MAX_CONCURRENT_RPCS_DEFAULT = 1_000
MAX_CONCURRENT_RPCS_PER_PRINCIPAL_DEFAULT = 200
AUTH_FAILURES_PER_SECOND_DEFAULT = 2.0
AUTH_FAILURE_BURST_DEFAULT = 20
SHUTDOWN_GRACE_SECONDS_DEFAULT = 10.0
MAX_RECEIVE_MESSAGE_BYTES_DEFAULT = 1024 * 1024
DB_RETRY_SECONDS_DEFAULT = 2.0
DB_COMMAND_TIMEOUT_SECONDS_DEFAULT = 10.0
DB_KEEPALIVE_SECONDS_DEFAULT = 60.0
DEV_KEY_FILE_DEFAULT = "uns-dev-key.txt"
METRICS_POLL_SECONDS_DEFAULT = 15.0
OTLP_PROTOCOLS = ("grpc", "http/protobuf")
# HTTP surface (action links, provider callbacks): bounds per request, like RPCs.
HTTP_MAX_BODY_BYTES_DEFAULT = 64 * 1024
HTTP_REQUEST_TIMEOUT_SECONDS_DEFAULT = 10.0
ACTION_LINK_KEY_MIN_CHARS = 32


class SettingsError(ValueError):
    """The configuration cannot work; the message says how to fix it."""


@dataclass(frozen=True)
class Settings:
    # Storage.
    database_url: str = DATABASE_URL_DEFAULT
    # PostgreSQL: where the LISTEN connection and migrations connect, when the pool's
    # database_url goes through a transaction-pooling pgbouncer (docs/deployment.md
    # "PgBouncer"); empty: database_url. Set, the pool keeps no prepared statements.
    listen_database_url: str = ""
    auto_migrate: bool = True
    # Transport.
    listen: str = LISTEN_DEFAULT
    # Connections (docs/deployment.md "Connections and file descriptors"): open client
    # connections of each listener (gRPC, HTTP); 0 sizes both below the open-file limit
    # (raised to the hard limit at start), keeping descriptors for the database.
    max_connections: int = 0
    # Open gRPC connections one client address may hold (counted by the gRPC port's
    # front, which relays to gRPC; 0: no cap and no front, gRPC listens itself).
    grpc_max_connections_per_peer: int = 64
    # A gRPC connection must finish its TLS and HTTP/2 handshake this soon after opening,
    # and one without a call in progress this long is closed (GOAWAY; clients reconnect).
    grpc_handshake_timeout_seconds: float = 10.0
    grpc_idle_timeout_seconds: float = 300.0
    # Share the listen port with other processes (SO_REUSEPORT: the kernel spreads
    # connections between them). Off, a second server on a taken address exits with
    # status 2 instead of silently taking part of the clients.
    reuse_port: bool = False
    # Serving processes on this host (docs/deployment.md "Several processes per host"):
    # above 1, this process only supervises that many children, each a whole server
    # (own event loop, dispatcher, LISTEN connection) on the same ports and database.
    processes: int = 1
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # With a client CA, clients must present a certificate (mTLS).
    tls_client_ca_file: str | None = None
    max_receive_message_bytes: int = MAX_RECEIVE_MESSAGE_BYTES_DEFAULT
    shutdown_grace_seconds: float = SHUTDOWN_GRACE_SECONDS_DEFAULT
    # Auth: API keys live in the database (``uns-admin keys``) and optionally in
    # a YAML/JSON key file (list of {key or key_sha256, principal, roles}).
    api_keys_file: str | None = None
    # On a loopback address with no key anywhere, create a dev key and write it here.
    dev_key_file: str = DEV_KEY_FILE_DEFAULT
    # Serve a non-loopback address without TLS (e.g. behind a TLS-terminating proxy).
    # Never waives API keys: a non-loopback server with no key refuses to start.
    allow_insecure: bool = False
    # Channels: YAML/JSON file (see README); without one only ``log`` exists.
    channels_file: str | None = None
    # Where notifications of a type without an ACTIVE policy go, comma-separated channel
    # names (e.g. "log"; scripts/serve sets it). Empty: such a type is refused with
    # FAILED_PRECONDITION / NO_POLICY, so a misspelled type is never "delivered" to a
    # channel nobody reads.
    default_channels: str = ""
    # Workers.
    dispatch_enabled: bool = True
    dispatch_concurrency: int = DISPATCH_CONCURRENCY_DEFAULT
    dispatch_batch_size: int = DISPATCH_BATCH_SIZE_DEFAULT
    # Bulkheads: provider calls of one channel in flight per process, so a provider
    # that hangs holds at most this many of the dispatch_concurrency slots.
    dispatch_channel_concurrency: int = DISPATCH_CHANNEL_CONCURRENCY_DEFAULT
    # Deferrals a provider's 429 may cause per delivery cycle without spending an
    # attempt; past it a 429 is an ordinary transient failure (max_attempts bounds it).
    dispatch_max_throttle_deferrals: int = DISPATCH_MAX_THROTTLE_DEFERRALS_DEFAULT
    lease_seconds: float = LEASE_SECONDS_DEFAULT
    idle_poll_seconds: float = IDLE_POLL_SECONDS_DEFAULT
    expiry_poll_seconds: float = EXPIRY_POLL_SECONDS_DEFAULT
    watch_heartbeat_seconds: float = WATCH_HEARTBEAT_SECONDS_DEFAULT
    # Events buffered per live subscriber, and their bytes (payload sizes); one that
    # falls further behind either bound is served from the table again (bounded memory
    # per stream, however large the events).
    watch_queue_max: int = WATCH_QUEUE_MAX_DEFAULT
    watch_queue_max_bytes: int = WATCH_QUEUE_MAX_BYTES_DEFAULT
    # Concurrent WatchEvents streams one principal may hold open; more are refused with
    # RESOURCE_EXHAUSTED / TOO_MANY_STREAMS (bounds the memory and fan-out one caller costs).
    watch_streams_per_principal: int = WATCH_STREAMS_PER_PRINCIPAL_DEFAULT
    # WatchEvents streams the whole server holds open; more are refused the same way.
    watch_streams_max: int = WATCH_STREAMS_MAX_DEFAULT
    # Load shedding (docs/deployment.md). Each principal has a token bucket: requests
    # (a stream's start counts once) take a token, refilled at rate_limit_per_second up
    # to rate_limit_burst; an empty bucket answers RESOURCE_EXHAUSTED / RATE_LIMITED with
    # a RetryInfo. 0 turns the limit off. rate_limits overrides it per principal:
    # "PRINCIPAL=RATE/BURST,..." (e.g. "batch-importer=1000/2000,ci=0" — 0: unlimited).
    rate_limit_per_second: float = RATE_LIMIT_PER_SECOND_DEFAULT
    rate_limit_burst: int = RATE_LIMIT_BURST_DEFAULT
    rate_limits: str = ""
    # Unary calls in progress across the server; more are shed with RATE_LIMITED.
    max_concurrent_rpcs: int = MAX_CONCURRENT_RPCS_DEFAULT
    # ...and those of one principal: slow calls (wait_for_first_attempt) of one tenant
    # cannot hold every server-wide slot.
    max_concurrent_rpcs_per_principal: int = MAX_CONCURRENT_RPCS_PER_PRINCIPAL_DEFAULT
    # Key lookups that find nothing, per client address (a bucket like the above): past
    # it, the address's keys are refused before they are looked up, so unknown keys
    # cannot force unbounded database reads (key-file and cached keys are unaffected).
    auth_failures_per_second: float = AUTH_FAILURES_PER_SECOND_DEFAULT
    auth_failure_burst: int = AUTH_FAILURE_BURST_DEFAULT
    db_retry_seconds: float = DB_RETRY_SECONDS_DEFAULT
    # Client-side bound on each PostgreSQL statement and connection attempt: a
    # silently partitioned database answers UNAVAILABLE instead of hanging callers.
    db_command_timeout_seconds: float = DB_COMMAND_TIMEOUT_SECONDS_DEFAULT
    # PostgreSQL's TCP keepalives on UNS's sessions: after a network cut the server ends
    # them (freeing their connection slots and locks) within about twice this. 0: off.
    db_keepalive_seconds: float = DB_KEEPALIVE_SECONDS_DEFAULT
    # Logs.
    log_level: str = "INFO"
    log_format: str = "json"
    # Observability (docs/deployment.md). Prometheus endpoint HOST:PORT, e.g.
    # 127.0.0.1:9464; off when empty. It is unauthenticated: bind loopback or a pod IP.
    metrics_listen: str = ""
    # How often the queue gauges (depth, oldest due age) are recomputed by one query.
    metrics_poll_seconds: float = METRICS_POLL_SECONDS_DEFAULT
    # OTLP collector for traces and metrics, e.g. http://otel-collector:4317; none when
    # unset (no network by default). The OTEL_EXPORTER_OTLP_* variables still apply.
    otlp_endpoint: str | None = None
    otlp_protocol: str = "grpc"  # or "http/protobuf" (port 4318)
    # HTTP surface (docs/deployment.md "Answering from messages"): action links and
    # provider callbacks, HOST:PORT; off when empty (scripts/serve turns it on, loopback).
    # TLS uses the same --tls-cert-file/--tls-key-file as gRPC.
    http_listen: str = ""
    # The base of every link in a message, e.g. https://uns.example.com (a proxy may
    # terminate TLS in front). Default: http(s)://<http_listen>.
    public_url: str = ""
    http_max_body_bytes: int = HTTP_MAX_BODY_BYTES_DEFAULT
    http_request_timeout_seconds: float = HTTP_REQUEST_TIMEOUT_SECONDS_DEFAULT
    # A connection whose request headers are not complete this long after it opened (or
    # after its previous answer) is closed; an idle keep-alive connection after the
    # second; one peer address holds at most this many connections (0: no cap). The
    # HTTP listener shares the process and its file descriptors with gRPC.
    http_header_timeout_seconds: float = 10.0
    http_keepalive_timeout_seconds: float = 75.0
    http_max_connections_per_peer: int = 64
    # Action-link signing keys, comma-separated, newest first: links are signed with the
    # first and verified with any (rotation: prepend a new key, drop the old one once its
    # links have expired). Empty (loopback only): a dev link key kept in
    # uns-dev-link-key.txt beside dev_key_file, so links survive a restart.
    action_link_keys: str = ""
    # Operator console (/console/ on the HTTP listener, docs/console.md): a session
    # ends after this long without a request, and this long after sign-in whatever.
    console_session_idle_minutes: float = 30.0
    console_session_absolute_hours: float = 12.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> Settings:
        """Read ``UNS_<FIELD>`` variables, then apply non-None ``overrides`` (flags)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = environ.get(f"UNS_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw, f.type)
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        settings.validate()
        return settings

    @property
    def host(self) -> str:
        host, _, _port = self.listen.rpartition(":")
        return host.strip("[]")

    @property
    def is_loopback(self) -> bool:
        host = self.host
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def http_enabled(self) -> bool:
        return bool(self.http_listen)

    @property
    def default_channel_names(self) -> tuple[str, ...]:
        """``default_channels`` as names, in order, without repeats."""
        names = (n.strip() for n in self.default_channels.split(","))
        return tuple(dict.fromkeys(n for n in names if n))

    @property
    def link_keys(self) -> tuple[str, ...]:
        """The action-link keys, newest (signing) first."""
        return tuple(k.strip() for k in self.action_link_keys.split(",") if k.strip())

    @property
    def base_url(self) -> str:
        """Where links point: ``public_url``, else the HTTP listen address itself."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host, _, port = self.http_listen.rpartition(":")
        if host in ("0.0.0.0", "::", "[::]"):
            host = "localhost"
        return f"{'https' if self.tls_enabled else 'http'}://{host}:{port}"

    def validate(self) -> None:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SettingsError(f"listen address must be HOST:PORT, got {self.listen!r}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise SettingsError("TLS needs both --tls-cert-file and --tls-key-file")
        if self.tls_client_ca_file and not self.tls_enabled:
            raise SettingsError("--tls-client-ca-file (mTLS) needs --tls-cert-file/--tls-key-file")
        for name in (
            "processes",
            "dispatch_concurrency",
            "dispatch_batch_size",
            "dispatch_channel_concurrency",
            "max_receive_message_bytes",
            "watch_queue_max",
            "watch_queue_max_bytes",
            "watch_streams_per_principal",
            "watch_streams_max",
            "max_concurrent_rpcs",
            "max_concurrent_rpcs_per_principal",
            "rate_limit_burst",
            "auth_failure_burst",
        ):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be at least 1")
        for name in ("lease_seconds", "idle_poll_seconds", "watch_heartbeat_seconds"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be positive")
        if self.dispatch_max_throttle_deferrals < 0:
            raise SettingsError("dispatch_max_throttle_deferrals must not be negative")
        for name in ("rate_limit_per_second", "auth_failures_per_second", "db_keepalive_seconds"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must not be negative (0 turns it off)")
        self.principal_rate_limits()  # raises on a malformed mapping
        for name in ("max_connections", "grpc_max_connections_per_peer"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must be 0 (see docs/deployment.md) or more")
        if self.grpc_handshake_timeout_seconds <= 0 or self.grpc_idle_timeout_seconds <= 0:
            raise SettingsError(
                "grpc_handshake_timeout_seconds and grpc_idle_timeout_seconds must be positive"
            )
        if self.log_format not in ("json", "text"):
            raise SettingsError("log_format must be 'json' or 'text'")
        if self.metrics_listen:
            m_host, m_sep, m_port = self.metrics_listen.rpartition(":")
            if not m_sep or not m_host or not m_port.isdigit():
                raise SettingsError(
                    f"metrics_listen must be HOST:PORT, got {self.metrics_listen!r}"
                )
        self._validate_http()
        self._validate_processes()
        if self.listen_database_url and not self.database_url.startswith("postgres"):
            raise SettingsError(
                "listen_database_url is for PostgreSQL (a LISTEN beside a pooled "
                "database_url); SQLite needs none"
            )
        if self.metrics_poll_seconds <= 0:
            raise SettingsError("metrics_poll_seconds must be positive")
        if self.otlp_protocol not in OTLP_PROTOCOLS:
            raise SettingsError(f"otlp_protocol must be one of {', '.join(OTLP_PROTOCOLS)}")
        if not self.is_loopback and not self.tls_enabled and not self.allow_insecure:
            raise SettingsError(
                f"refusing to serve {self.listen} without TLS: API keys would cross the "
                "network in clear text. Configure --tls-cert-file/--tls-key-file, bind a "
                "loopback address, or pass --allow-insecure if a proxy terminates TLS."
            )

    def _validate_processes(self) -> None:
        if self.processes == 1:
            return
        if not self.database_url.startswith("postgres"):
            # SQLite takes one writer at a time through a file lock and has no LISTEN:
            # more processes would queue on the lock and hear each other's commits only
            # by polling. A quickstart on SQLite is one process.
            raise SettingsError(
                f"--processes {self.processes} needs PostgreSQL: SQLite serves one process "
                "(one writer at a time, no LISTEN). Use --processes 1, or a postgresql:// "
                "--database-url"
            )
        _host, _, m_port = self.metrics_listen.rpartition(":")
        if self.metrics_listen and int(m_port) and int(m_port) + self.processes - 1 > 65535:
            raise SettingsError(
                f"--metrics-listen {self.metrics_listen} with --processes {self.processes}: "
                "process i serves metrics on port PORT+i, past 65535; choose a lower port"
            )

    def principal_rate_limits(self) -> dict[str, tuple[float, int]]:
        """``rate_limits`` as principal -> (per second, burst); rate 0 means unlimited."""
        limits: dict[str, tuple[float, int]] = {}
        for entry in self.rate_limits.split(","):
            if not entry.strip():
                continue
            principal, eq, value = entry.rpartition("=")
            rate, slash, burst = value.partition("/")
            try:
                parsed = (float(rate), int(burst) if slash else self.rate_limit_burst)
            except ValueError:
                parsed = (-1.0, 0)
            if not eq or not principal.strip() or parsed[0] < 0 or parsed[1] < 1:
                raise SettingsError(
                    f"rate_limits: cannot read {entry.strip()!r}; use PRINCIPAL=RATE/BURST "
                    "(rate per second, 0 for unlimited; burst at least 1), comma-separated"
                )
            limits[principal.strip()] = parsed
        return limits

    def _validate_http(self) -> None:
        if not self.http_listen:
            return
        h_host, h_sep, h_port = self.http_listen.rpartition(":")
        if not h_sep or not h_host or not h_port.isdigit():
            raise SettingsError(f"http_listen must be HOST:PORT, got {self.http_listen!r}")
        if self.public_url and not self.public_url.startswith(("https://", "http://")):
            raise SettingsError(f"public_url must be an http(s) URL, got {self.public_url!r}")
        if self.http_max_body_bytes < 1:
            raise SettingsError("http_max_body_bytes must be at least 1")
        if self.http_request_timeout_seconds <= 0:
            raise SettingsError("http_request_timeout_seconds must be positive")
        if self.http_header_timeout_seconds <= 0 or self.http_keepalive_timeout_seconds <= 0:
            raise SettingsError(
                "http_header_timeout_seconds and http_keepalive_timeout_seconds must be positive"
            )
        if self.http_max_connections_per_peer < 0:
            raise SettingsError("http_max_connections_per_peer must be 0 (no cap) or more")
        if self.console_session_idle_minutes <= 0 or self.console_session_absolute_hours <= 0:
            raise SettingsError("console session idle and absolute expiry must be positive")
        if any(len(k) < ACTION_LINK_KEY_MIN_CHARS for k in self.link_keys):
            raise SettingsError(
                f"every action_link_keys entry needs at least {ACTION_LINK_KEY_MIN_CHARS} "
                "characters (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        h_loopback = _is_loopback_host(h_host.strip("[]"))
        if not self.link_keys and not (h_loopback and self.is_loopback):
            raise SettingsError(
                "the HTTP surface on a non-loopback address needs --action-link-keys "
                "(links must survive restarts and verify on every replica)"
            )
        if not h_loopback and not self.tls_enabled and not self.allow_insecure:
            raise SettingsError(
                f"refusing to serve HTTP on {self.http_listen} without TLS: action links are "
                "capabilities. Configure --tls-cert-file/--tls-key-file, bind a loopback "
                "address, or pass --allow-insecure if a proxy terminates TLS."
            )


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parse(name: str, raw: str, type_: Any) -> Any:
    type_s = str(type_)
    try:
        if type_s.startswith("bool"):
            lowered = raw.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(raw)
            return lowered in ("1", "true", "yes", "on")
        if type_s.startswith("int"):
            return int(raw)
        if type_s.startswith("float"):
            return float(raw)
    except ValueError as exc:
        raise SettingsError(f"UNS_{name.upper()}: cannot parse {raw!r} as {type_s}") from exc
    return raw
