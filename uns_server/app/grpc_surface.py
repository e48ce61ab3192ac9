"""The gRPC server's wiring: channel options, TLS credentials and the services, each
handler wrapped once (spans, load shedding, then the decode guard)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from uns.v1 import (
    audit_service_pb2,
    audit_service_pb2_grpc,
    heartbeat_service_pb2,
    heartbeat_service_pb2_grpc,
    key_service_pb2,
    key_service_pb2_grpc,
    maintenance_service_pb2,
    maintenance_service_pb2_grpc,
    notification_service_pb2,
    notification_service_pb2_grpc,
    policy_service_pb2,
    policy_service_pb2_grpc,
    recipient_service_pb2,
    recipient_service_pb2_grpc,
)
from uns_server.api.audit_servicer import AuditServicer
from uns_server.api.bind import reuse_port_option
from uns_server.api.handlers import decode_guard
from uns_server.api.heartbeat_servicer import HeartbeatServicer
from uns_server.api.key_servicer import KeyServicer
from uns_server.api.maintenance_servicer import MaintenanceServicer
from uns_server.api.notification_servicer import NotificationServicer
from uns_server.api.policy_servicer import PolicyServicer
from uns_server.api.recipient_servicer import RecipientServicer
from uns_server.api.reflection import add_reflection
from uns_server.api.wrapping import WrappingRegistrar
from uns_server.settings import Settings

if TYPE_CHECKING:
    from uns_server.app.root import App

KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
# Clients may ping every 10 s without data (long-lived WatchEvents streams).
MIN_CLIENT_PING_INTERVAL_MS = 10_000


# Connections gRPC itself accepts beyond the server-wide cap: JSON over HTTP's bridge.
BRIDGE_CONNECTIONS = 64


def server(settings: Settings, max_connections: int) -> grpc.aio.Server:
    """``max_connections``: the server-wide cap (``app.descriptors``). gRPC counts its
    own connections too (``grpc.max_allowed_incoming_connections``: past it a new one is
    closed at once), bounds the TLS and HTTP/2 handshake, and closes a connection idle
    of calls (GOAWAY: clients reconnect when they next call)."""
    return grpc.aio.server(
        options=[
            ("grpc.max_allowed_incoming_connections", max_connections + BRIDGE_CONNECTIONS),
            (
                "grpc.server_handshake_timeout_ms",
                int(settings.grpc_handshake_timeout_seconds * 1000),
            ),
            ("grpc.max_connection_idle_ms", int(settings.grpc_idle_timeout_seconds * 1000)),
            ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
            ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            reuse_port_option(settings.reuse_port),
        ],
    )


def add_services(app: App) -> None:
    """Every handler wrapped once here (RPC metrics, spans, load shedding, then the decode
    guard), not by interceptors on every call."""
    # Any: the generated functions are typed for a grpc Server, and the registrar has
    # only the two methods they call.
    registrar: Any = WrappingRegistrar(
        app.server,
        [
            app.telemetry.rpc_metrics_wrapper,
            app.telemetry.rpc_wrapper,
            app.admission.wrap,
            decode_guard,
        ],
    )
    notification_service_pb2_grpc.add_NotificationServiceServicer_to_server(
        NotificationServicer(
            app.authenticator,
            app.intake,
            app.operator.queries,
            app.acks,
            app.operator.operations,
            app.watch,
            app.withdrawals,
            budget=app.admission.over_budget,
            snoozes=app.snoozes,
        ),
        registrar,
    )
    policy_service_pb2_grpc.add_PolicyServiceServicer_to_server(
        PolicyServicer(app.authenticator, app.operator.policies),
        registrar,
    )
    audit_service_pb2_grpc.add_AuditServiceServicer_to_server(
        AuditServicer(app.operator.audit, app.authenticator), registrar
    )
    key_service_pb2_grpc.add_KeyServiceServicer_to_server(
        KeyServicer(app.authenticator, app.operator.keys), registrar
    )
    recipient_service_pb2_grpc.add_RecipientServiceServicer_to_server(
        RecipientServicer(app.authenticator, app.operator.people),
        registrar,
    )
    maintenance_service_pb2_grpc.add_MaintenanceServiceServicer_to_server(
        MaintenanceServicer(app.authenticator, app.operator.maintenance),
        registrar,
    )
    heartbeat_service_pb2_grpc.add_HeartbeatServiceServicer_to_server(
        HeartbeatServicer(app.authenticator, app.heartbeats, app.clock), registrar
    )
    health_pb2_grpc.add_HealthServicer_to_server(app.health.servicer, registrar)
    services = (
        notification_service_pb2.DESCRIPTOR.services_by_name["NotificationService"].full_name,
        policy_service_pb2.DESCRIPTOR.services_by_name["PolicyService"].full_name,
        audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name,
        key_service_pb2.DESCRIPTOR.services_by_name["KeyService"].full_name,
        recipient_service_pb2.DESCRIPTOR.services_by_name["RecipientService"].full_name,
        maintenance_service_pb2.DESCRIPTOR.services_by_name["MaintenanceService"].full_name,
        heartbeat_service_pb2.DESCRIPTOR.services_by_name["HeartbeatService"].full_name,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
    )
    add_reflection(services, registrar)


def credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS (and mutual TLS with a client CA) when configured; None: plaintext."""
    s = settings
    if not s.tls_enabled:
        return None
    assert s.tls_cert_file and s.tls_key_file
    return grpc.ssl_server_credentials(
        [(Path(s.tls_key_file).read_bytes(), Path(s.tls_cert_file).read_bytes())],
        root_certificates=(
            Path(s.tls_client_ca_file).read_bytes() if s.tls_client_ca_file else None
        ),
        require_client_auth=s.tls_client_ca_file is not None,
    )
