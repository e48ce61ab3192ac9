"""One line of ``uns-server --help`` per setting: what it does, then its unit in brackets;
and the concern each setting is listed under (``GROUPS``, argparse argument groups).

Kept apart from ``Settings`` (whose comments say why each setting exists) so that the
dataclass stays readable. Every field needs an entry in both: tests/cli/test_server_help.py
fails on a setting without one (the CLI itself still starts, showing only its variable,
under "other settings").
"""

from __future__ import annotations

HELP: dict[str, str] = {
    "database_url": "SQLAlchemy URL of the database: sqlite+aiosqlite:///FILE or "
    "postgresql+asyncpg://... (URL)",
    "listen_database_url": "PostgreSQL URL for LISTEN and migrations when --database-url "
    "goes through a transaction-pooling pgbouncer; empty: --database-url (URL)",
    "auto_migrate": "migrate the schema to the newest revision at start (on/off)",
    "listen": "gRPC listen address (HOST:PORT)",
    "max_connections": "open client connections of each listener, gRPC and HTTP; 0 sizes them "
    "below the open-file limit (connections)",
    "grpc_max_connections_per_peer": "open gRPC connections one client address may hold; 0: "
    "no cap and no relay (connections)",
    "grpc_handshake_timeout_seconds": "time a gRPC connection has to finish its TLS and HTTP/2 "
    "handshake (seconds)",
    "grpc_idle_timeout_seconds": "a gRPC connection without a call this long is closed (seconds)",
    "reuse_port": "share the gRPC and HTTP ports with other processes via SO_REUSEPORT (on/off)",
    "processes": "serving processes on this host under one supervisor, sharing the ports and "
    "the database; above 1 needs PostgreSQL (count)",
    "tls_cert_file": "TLS certificate chain for gRPC and HTTP (PEM file path)",
    "tls_key_file": "TLS private key for --tls-cert-file (PEM file path)",
    "tls_client_ca_file": "CA whose client certificates are required: mTLS (PEM file path)",
    "max_receive_message_bytes": "largest gRPC request accepted (bytes)",
    "shutdown_grace_seconds": "time in-flight calls get to finish on SIGTERM (seconds)",
    "api_keys_file": "API keys besides the database's: key or key_sha256, principal, roles "
    "(YAML/JSON file path)",
    "dev_key_file": "where a loopback server with no key at all writes its all-roles dev key "
    "(file path)",
    "allow_insecure": "serve a non-loopback address without TLS, e.g. behind a TLS proxy (on/off)",
    "channels_file": "channel definitions; without it only the log channel exists "
    "(YAML/JSON file path)",
    "default_channels": "channels for notification types without an ACTIVE policy; empty: "
    "such types are refused with NO_POLICY (comma-separated channel names)",
    "dispatch_enabled": "run the delivery workers in this process (on/off)",
    "dispatch_concurrency": "provider calls in flight at once (count)",
    "dispatch_batch_size": "due notifications claimed per query (count)",
    "dispatch_channel_concurrency": "provider calls of one channel in flight at once: a "
    "hanging provider holds no more delivery slots (count)",
    "dispatch_max_throttle_deferrals": "deferrals a provider's 429 may cause per delivery "
    "cycle without spending an attempt (count)",
    "lease_seconds": "how long a claimed delivery is reserved for its worker (seconds)",
    "idle_poll_seconds": "how often idle workers look for due work without a wake-up (seconds)",
    "expiry_poll_seconds": "how often the timers (ack deadlines, snooze ends, heartbeat "
    "deadlines, windows' ends) are checked (seconds)",
    "watch_heartbeat_seconds": "interval between heartbeats on a quiet WatchEvents stream "
    "(seconds)",
    "watch_queue_max": "events buffered per live subscriber before it is re-read from the "
    "table (events)",
    "watch_queue_max_bytes": "payload buffered per live subscriber before it is re-read from "
    "the table (bytes)",
    "watch_streams_per_principal": "open WatchEvents streams one principal may hold (streams)",
    "watch_streams_max": "open WatchEvents streams the whole server holds (streams)",
    "rate_limit_per_second": "request budget refill per principal, 0 turns it off "
    "(requests per second)",
    "rate_limit_burst": "request budget size per principal (requests)",
    "rate_limits": "per-principal overrides PRINCIPAL=RATE/BURST,... (requests per second "
    "/ requests)",
    "max_concurrent_rpcs": "unary calls in progress server-wide before shedding (calls)",
    "max_concurrent_rpcs_per_principal": "unary calls in progress of one principal before "
    "shedding (calls)",
    "auth_failures_per_second": "unknown-key lookups allowed per client address, refill "
    "(lookups per second)",
    "auth_failure_burst": "unknown-key lookups allowed per client address, bucket size (lookups)",
    "db_retry_seconds": "wait between attempts to reach the database at start (seconds)",
    "db_command_timeout_seconds": "bound on each PostgreSQL statement and connection attempt "
    "(seconds)",
    "db_keepalive_seconds": "PostgreSQL TCP keepalives: sessions cut off by the network end "
    "within about twice this; 0 off (seconds)",
    "log_level": "lowest level logged: DEBUG, INFO, WARNING, ERROR (level name)",
    "log_format": "log line format: json or text (key=value) (format name)",
    "metrics_listen": "Prometheus /metrics address, unauthenticated; off when empty (HOST:PORT)",
    "metrics_poll_seconds": "how often the queue gauges are recomputed (seconds)",
    "otlp_endpoint": "OTLP collector for traces and metrics; none when unset (URL)",
    "otlp_protocol": "OTLP transport: grpc or http/protobuf (protocol name)",
    "http_listen": "HTTP listen address for JSON, action links, callbacks and the console; "
    "off when empty (HOST:PORT)",
    "public_url": "base of every link in a message; default http(s)://<http-listen> (URL)",
    "http_max_body_bytes": "largest HTTP request body accepted (bytes)",
    "http_request_timeout_seconds": "bound on handling one HTTP request (seconds)",
    "http_header_timeout_seconds": "time a connection has to send complete request headers "
    "(seconds)",
    "http_keepalive_timeout_seconds": "idle keep-alive HTTP connections close after this (seconds)",
    "http_max_connections_per_peer": "HTTP connections one peer address may hold, 0 for no "
    "cap (connections)",
    "action_link_keys": "action-link signing keys, newest first; empty on loopback: a dev "
    "link key beside the dev key (comma-separated secrets)",
    "console_session_idle_minutes": "console session ends after this long without a request "
    "(minutes)",
    "console_session_absolute_hours": "console session ends this long after sign-in (hours)",
}

# --help lists the settings by concern, in this order (each group's flags in field order).
GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "storage": (
        "the database, its migrations and how long to wait for it",
        (
            "database_url",
            "listen_database_url",
            "auto_migrate",
            "db_retry_seconds",
            "db_command_timeout_seconds",
            "db_keepalive_seconds",
        ),
    ),
    "gRPC listener and processes": (
        "where calls arrive, how large they may be, and how the server stops",
        (
            "listen",
            "reuse_port",
            "processes",
            "max_connections",
            "grpc_max_connections_per_peer",
            "grpc_handshake_timeout_seconds",
            "grpc_idle_timeout_seconds",
            "max_receive_message_bytes",
            "shutdown_grace_seconds",
        ),
    ),
    "TLS and API keys": (
        "who may call, and over what",
        (
            "tls_cert_file",
            "tls_key_file",
            "tls_client_ca_file",
            "api_keys_file",
            "dev_key_file",
            "allow_insecure",
        ),
    ),
    "channels and delivery": (
        "where notifications go, and the workers that send them",
        (
            "channels_file",
            "default_channels",
            "dispatch_enabled",
            "dispatch_concurrency",
            "dispatch_batch_size",
            "dispatch_channel_concurrency",
            "dispatch_max_throttle_deferrals",
            "lease_seconds",
            "idle_poll_seconds",
            "expiry_poll_seconds",
        ),
    ),
    "event streams": (
        "WatchEvents: heartbeats, buffers, how many streams",
        (
            "watch_heartbeat_seconds",
            "watch_queue_max",
            "watch_queue_max_bytes",
            "watch_streams_per_principal",
            "watch_streams_max",
        ),
    ),
    "load shedding": (
        "request budgets and caps (docs/deployment.md, Load shedding)",
        (
            "rate_limit_per_second",
            "rate_limit_burst",
            "rate_limits",
            "max_concurrent_rpcs",
            "max_concurrent_rpcs_per_principal",
            "auth_failures_per_second",
            "auth_failure_burst",
        ),
    ),
    "logs, metrics and traces": (
        "what the server tells its operators",
        (
            "log_level",
            "log_format",
            "metrics_listen",
            "metrics_poll_seconds",
            "otlp_endpoint",
            "otlp_protocol",
        ),
    ),
    "HTTP surface": (
        "JSON over HTTP, action links, provider callbacks and the operator console",
        (
            "http_listen",
            "public_url",
            "http_max_body_bytes",
            "http_request_timeout_seconds",
            "http_header_timeout_seconds",
            "http_keepalive_timeout_seconds",
            "http_max_connections_per_peer",
            "action_link_keys",
            "console_session_idle_minutes",
            "console_session_absolute_hours",
        ),
    ),
}
