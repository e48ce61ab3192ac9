"""Composition root: settings -> database -> services -> workers -> gRPC server.

Start-up never crashes on a database that is down: the server listens at once with
health NOT_SERVING, retries the connection (and migration) in the background, and
turns SERVING only when the schema is at head. A monitor flips health back to
NOT_SERVING while the database is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.trace import TracerProvider as ApiTracerProvider

from uns.v1 import (
    audit_service_pb2,
    audit_service_pb2_grpc,
    key_service_pb2,
    key_service_pb2_grpc,
    notification_service_pb2,
    notification_service_pb2_grpc,
    policy_service_pb2,
    policy_service_pb2_grpc,
)
from uns_server.api.audit_servicer import AuditServicer
from uns_server.api.handlers import decode_guard
from uns_server.api.key_servicer import KeyServicer
from uns_server.api.notification_servicer import NotificationServicer
from uns_server.api.policy_servicer import PolicyServicer
from uns_server.api.reflection import add_reflection
from uns_server.api.wrapping import WrappingRegistrar
from uns_server.channels.config import load_channels_config
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain.enums import Role
from uns_server.domain.policy import ServerDefaults
from uns_server.observability.telemetry import Telemetry
from uns_server.services import auth
from uns_server.services.acks import Acks
from uns_server.services.intake import Intake
from uns_server.services.operations import Operations
from uns_server.services.policies import PolicyService
from uns_server.services.queries import Queries
from uns_server.services.watch import EventHub, Watch
from uns_server.services.withdrawal import Withdrawals
from uns_server.settings import Settings, SettingsError
from uns_server.store import api_keys, migrate
from uns_server.store.db import TOPIC_EVENTS, TOPIC_WORK, Database
from uns_server.store.listen import listen_forever
from uns_server.workers.dispatch import Dispatcher
from uns_server.workers.expiry import ExpiryWorker
from uns_server.workers.followups import FollowUpWorker
from uns_server.workers.statistics import FirstAnalyze

log = logging.getLogger("uns.server")

KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
# Clients may ping every 10 s without data (long-lived WatchEvents streams).
MIN_CLIENT_PING_INTERVAL_MS = 10_000
HEALTH_CHECK_SECONDS = 5.0
NOTIFICATION_SERVICE = "uns.v1.NotificationService"


def utcnow() -> datetime:
    return datetime.now(UTC)


class App:
    def __init__(
        self,
        settings: Settings,
        environ: dict[str, str] | None = None,
        clock: Callable[[], datetime] = utcnow,
        tracer_provider: ApiTracerProvider | None = None,
    ) -> None:
        """``tracer_provider`` replaces the one the settings describe (tests capture
        spans in memory with it)."""
        self.settings = settings
        self.clock = clock
        self.db = Database(
            settings.database_url, command_timeout=settings.db_command_timeout_seconds
        )
        self.health = health.aio.HealthServicer()
        key_file = auth.load_key_file(settings.api_keys_file) if settings.api_keys_file else None
        self.authenticator = auth.Authenticator(self.db, key_file)
        self._key_file = key_file
        channel_data: Any = {}
        if settings.channels_file:
            channel_data = yaml.safe_load(Path(settings.channels_file).read_text()) or {}
        self.channels = ChannelRegistry.from_config(load_channels_config(channel_data, environ))
        self.telemetry = Telemetry.from_settings(settings, tracer_provider)
        self.dispatcher = Dispatcher(
            self.db,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            batch_size=settings.dispatch_batch_size,
            concurrency=settings.dispatch_concurrency,
            idle_poll_seconds=settings.idle_poll_seconds,
            telemetry=self.telemetry,
        )
        self.intake = Intake(
            self.db, ServerDefaults(), clock, self.telemetry.metrics, handoff=self.dispatcher
        )
        self.acks = Acks(self.db, clock, self.telemetry.metrics)
        self.expiry = ExpiryWorker(self.acks, settings.expiry_poll_seconds)
        self.followups = FollowUpWorker(
            self.db,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            poll_seconds=settings.idle_poll_seconds,
        )
        self.hub = EventHub(self.db, settings.watch_queue_max)
        self.telemetry.observe(self.hub)
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
                ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
                ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
                ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
            ],
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._writer_tasks: list[asyncio.Task[None]] = []  # stopped, not cancelled
        self.ready = asyncio.Event()
        self._fatal: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.port = 0

    async def start(self) -> None:
        s = self.settings
        # Every handler wrapped once here (spans, then the decode guard), not by
        # interceptors on every call. (Any: the generated functions are typed for a
        # grpc Server, and the registrar has only the two methods they call.)
        registrar: Any = WrappingRegistrar(self.server, [self.telemetry.rpc_wrapper, decode_guard])
        notification_service_pb2_grpc.add_NotificationServiceServicer_to_server(
            NotificationServicer(
                self.db,
                self.authenticator,
                self.intake,
                Queries(self.db),
                self.acks,
                Operations(self.db, self.clock),
                Watch(
                    self.db,
                    self.hub,
                    s.watch_heartbeat_seconds,
                    self.clock,
                    s.watch_streams_per_principal,
                ),
                Withdrawals(self.db, self.clock),
            ),
            registrar,
        )
        policy_service_pb2_grpc.add_PolicyServiceServicer_to_server(
            PolicyServicer(self.authenticator, PolicyService(self.db, self.clock)), registrar
        )
        audit_service_pb2_grpc.add_AuditServiceServicer_to_server(
            AuditServicer(self.db, self.authenticator), registrar
        )
        key_service_pb2_grpc.add_KeyServiceServicer_to_server(
            KeyServicer(self.authenticator, self.db, self.clock), registrar
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, registrar)
        services = (
            notification_service_pb2.DESCRIPTOR.services_by_name["NotificationService"].full_name,
            policy_service_pb2.DESCRIPTOR.services_by_name["PolicyService"].full_name,
            audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name,
            key_service_pb2.DESCRIPTOR.services_by_name["KeyService"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        )
        add_reflection(services, registrar)
        await self._set_health(serving=False)
        if s.tls_enabled:
            assert s.tls_cert_file and s.tls_key_file
            creds = grpc.ssl_server_credentials(
                [(Path(s.tls_key_file).read_bytes(), Path(s.tls_cert_file).read_bytes())],
                root_certificates=(
                    Path(s.tls_client_ca_file).read_bytes() if s.tls_client_ca_file else None
                ),
                require_client_auth=s.tls_client_ca_file is not None,
            )
            self.port = self.server.add_secure_port(s.listen, creds)
        else:
            self.port = self.server.add_insecure_port(s.listen)
        if self.port == 0:
            raise SettingsError(f"cannot listen on {s.listen}")
        await self.server.start()
        if s.metrics_listen:
            try:
                metrics_port = self.telemetry.serve_metrics()
            except OSError as exc:
                raise SettingsError(f"cannot listen on {s.metrics_listen}: {exc}") from exc
            log.info("metrics", extra={"metrics_listen": s.metrics_listen, "port": metrics_port})
        log.info("listening", extra={"listen": s.listen, "port": self.port, "tls": s.tls_enabled})
        self._tasks.append(asyncio.create_task(self._become_ready()))

    async def failure(self) -> str | None:
        """Resolves with a message when the server cannot ever become ready."""
        return await self._fatal

    async def _set_health(self, *, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", NOTIFICATION_SERVICE):
            await self.health.set(name, status)

    async def _become_ready(self) -> None:
        s = self.settings
        while True:
            try:
                if s.auto_migrate:
                    await migrate.upgrade(self.db)
                if not await migrate.is_migrated(self.db):
                    log.error("database schema is not at head; run `uns-admin migrate`")
                else:
                    await self._check_auth_setup()
                    break
            except SettingsError as exc:
                self._fatal.set_result(str(exc))
                return
            except Exception as exc:
                log.error(
                    "database unavailable; retrying",
                    extra={
                        "error": f"{type(exc).__name__}: {exc}",
                        "retry_seconds": s.db_retry_seconds,
                    },
                )
            await asyncio.sleep(s.db_retry_seconds)
        await self.hub.start()
        if self.db.is_postgres:
            self._tasks.append(
                asyncio.create_task(listen_forever(self.db, (TOPIC_EVENTS, TOPIC_WORK)))
            )
            self._tasks.append(asyncio.create_task(FirstAnalyze(self.db).run()))
        await self._set_health(serving=True)
        self.ready.set()
        log.info("ready: database reachable and migrated")
        if s.dispatch_enabled:
            self._writer_tasks = [
                asyncio.create_task(self.dispatcher.run()),
                asyncio.create_task(self.expiry.run()),
                asyncio.create_task(self.followups.run()),
            ]
            self._tasks.extend(self._writer_tasks)
        self._tasks.append(asyncio.create_task(self._monitor()))
        sampler = self.telemetry.queue_sampler(self.db, self.clock)
        if sampler is not None:
            self._tasks.append(asyncio.create_task(sampler.run()))

    async def _check_auth_setup(self) -> None:
        async with self.db.read() as conn:
            keys = await api_keys.count_active(conn)
        if keys or self._key_file:
            return
        s = self.settings
        if not s.is_loopback:
            # --allow-insecure waives TLS only: never mint an all-roles key for a
            # network-reachable address, and serving with no key at all is useless.
            raise SettingsError(
                f"refusing to serve {s.listen} with no API key configured: create one with "
                "`uns-admin keys create` or pass --api-keys-file (a dev key is created "
                "automatically only on a loopback address)"
            )
        # Zero-ceremony quickstart on loopback: mint a key for every role, once. The file
        # is written inside the transaction (created 0600, never readable by others even
        # briefly); if it cannot be written, no key is stored and start-up fails clearly.
        secret, digest, prefix = auth.new_key()
        path = Path(s.dev_key_file)
        async with self.db.write() as tx:
            await api_keys.insert_key(
                tx.conn,
                key_id=str(uuid.uuid4()),
                key_hash=digest,
                prefix=prefix,
                principal="dev",
                roles=sorted(r.value for r in Role),
                responds_for=[],
                description="quickstart key",
                now=self.clock(),
            )
            try:
                path.unlink(missing_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(secret + "\n")
            except OSError as exc:
                raise SettingsError(f"cannot write the dev key file {path}: {exc}") from exc
        log.warning(
            "no API keys existed: created a dev key with all roles. Authenticate with "
            f"'authorization: Bearer <key>', the key is in {s.dev_key_file}",
            extra={"dev_key_file": s.dev_key_file},
        )

    async def _monitor(self) -> None:
        serving = True
        while True:
            await asyncio.sleep(HEALTH_CHECK_SECONDS)
            try:
                async with asyncio.timeout(HEALTH_CHECK_SECONDS):
                    await self.db.ping()
                ok = True
            except Exception:
                ok = False
            if ok != serving:
                serving = ok
                await self._set_health(serving=ok)
                log.warning("database %s", "reachable again" if ok else "unreachable")

    async def stop(self, grace: float | None = None) -> None:
        grace = self.settings.shutdown_grace_seconds if grace is None else grace
        log.info("shutting down", extra={"grace_seconds": grace})
        await self._set_health(serving=False)
        # End watch streams first, with a resumable UNAVAILABLE, so the drain below
        # waits only for unary calls.
        await self.hub.close()
        # Writers finish their current transaction instead of being cancelled inside
        # it; whatever is still running after the grace period is cancelled.
        self.dispatcher.stop()
        self.expiry.stop()
        self.followups.stop()
        writers = [t for t in self._writer_tasks if not t.done()]
        if writers:
            await asyncio.wait(writers, timeout=grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Stops accepting at once, lets in-flight calls finish within the grace.
        await self.server.stop(grace)
        await self.channels.aclose()
        await self.db.dispose()
        await self.telemetry.aclose()
