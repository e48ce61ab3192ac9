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
import secrets
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
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
from uns_server.aio import wait_event
from uns_server.api.admission import Admission
from uns_server.api.audit_servicer import AuditServicer
from uns_server.api.bind import bind_failure, reuse_port_option
from uns_server.api.handlers import decode_guard
from uns_server.api.key_servicer import KeyServicer
from uns_server.api.notification_servicer import NotificationServicer
from uns_server.api.policy_servicer import PolicyServicer
from uns_server.api.reflection import add_reflection
from uns_server.api.wrapping import WrappingRegistrar
from uns_server.channels.config import PagerDutyConfig, SlackConfig, load_channels_config
from uns_server.channels.fingerprint import channel_fingerprint
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain.enums import Role
from uns_server.domain.links import LinkSigner
from uns_server.domain.policy import ServerDefaults
from uns_server.http import console as http_console
from uns_server.http import health as http_health
from uns_server.http import integrations as http_integrations
from uns_server.http import links as http_links
from uns_server.http.console.sessions import Sessions
from uns_server.http.server import HttpServer
from uns_server.observability import phases
from uns_server.observability.telemetry import Telemetry
from uns_server.services import auth, message_updates
from uns_server.services.acks import Acks
from uns_server.services.action_links import ActionLinkService
from uns_server.services.audit import AuditTrail
from uns_server.services.intake import Intake
from uns_server.services.keys import KeyService
from uns_server.services.operations import Operations
from uns_server.services.policies import PolicyService
from uns_server.services.provider_answers import ProviderAnswers
from uns_server.services.queries import Queries
from uns_server.services.rate_limits import TokenBuckets
from uns_server.services.watch import EventHub, Watch
from uns_server.services.withdrawal import Withdrawals
from uns_server.settings import Settings, SettingsError
from uns_server.store import api_keys, durability, migrate
from uns_server.store.clock import DatabaseClock, host_clock
from uns_server.store.db import TOPIC_EVENTS, TOPIC_WORK, Database
from uns_server.store.listen import listen_forever
from uns_server.workers.dispatch import Dispatcher
from uns_server.workers.expiry import ExpiryWorker
from uns_server.workers.followups import FollowUpWorker
from uns_server.workers.message_updates import MessageUpdater
from uns_server.workers.queue_sampler import QueueSampler
from uns_server.workers.statistics import FirstAnalyze
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.server")

KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
# Clients may ping every 10 s without data (long-lived WatchEvents streams).
MIN_CLIENT_PING_INTERVAL_MS = 10_000
HEALTH_CHECK_SECONDS = 5.0
NOTIFICATION_SERVICE = "uns.v1.NotificationService"


class App:
    def __init__(
        self,
        settings: Settings,
        environ: dict[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        tracer_provider: ApiTracerProvider | None = None,
    ) -> None:
        """``clock`` replaces the database's (``store.clock``; tests move time with it);
        ``tracer_provider`` the one the settings describe (tests capture spans in
        memory with it)."""
        self.settings = settings
        self.db_clock = DatabaseClock(host_clock(environ)) if clock is None else None
        clock = clock or self.db_clock
        assert clock is not None
        self.clock = clock
        self.db = Database(
            settings.database_url, command_timeout=settings.db_command_timeout_seconds
        )
        self.health = health.aio.HealthServicer()
        key_file = auth.load_key_file(settings.api_keys_file) if settings.api_keys_file else None
        self.authenticator = auth.Authenticator(
            self.db,
            key_file,
            failed_lookups=TokenBuckets(
                settings.auth_failures_per_second, settings.auth_failure_burst
            ),
        )
        self._key_file = key_file
        channel_data: Any = {}
        if settings.channels_file:
            channel_data = yaml.safe_load(Path(settings.channels_file).read_text()) or {}
        self.channels_config = load_channels_config(channel_data, environ)
        self.channels = ChannelRegistry.from_config(self.channels_config)
        self.channel_fingerprint = channel_fingerprint(self.channels_config)
        self.telemetry = Telemetry.from_settings(settings, tracer_provider)
        if phases.REQUESTED:
            self.telemetry.metrics.observe_phases()
        self.telemetry.metrics.channel_config(self.channel_fingerprint, self.channels.names())
        # Repeated storage faults of the workers turn health NOT_SERVING (``_monitor``).
        self.supervision = Supervision()
        self.acks = Acks(self.db, clock, self.telemetry.metrics)
        self.links = self._link_service() if settings.http_enabled else None
        self.admission = Admission(
            self.authenticator,
            TokenBuckets(
                settings.rate_limit_per_second,
                settings.rate_limit_burst,
                settings.principal_rate_limits(),
            ),
            settings.max_concurrent_rpcs,
            self.telemetry.metrics,
        )
        self.dispatcher = Dispatcher(
            self.db,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            batch_size=settings.dispatch_batch_size,
            concurrency=settings.dispatch_concurrency,
            idle_poll_seconds=settings.idle_poll_seconds,
            telemetry=self.telemetry,
            supervision=self.supervision,
            links=self.links,
        )
        self.intake = Intake(
            self.db, ServerDefaults(), clock, self.telemetry.metrics, handoff=self.dispatcher
        )
        self.expiry = ExpiryWorker(self.acks, settings.expiry_poll_seconds, self.supervision)
        # Sent messages show how the obligation ended (Slack chat.update, PagerDuty
        # acknowledge/resolve): queued with every settlement, sent by this worker.
        self.acks.settle_hooks.append(message_updates.queue_on_settle)
        self.message_updater = MessageUpdater(
            self.db,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            idle_poll_seconds=settings.idle_poll_seconds,
        )
        # Reminders and escalation steps of pending acks (policy reminder/escalation).
        self.followups = FollowUpWorker(
            self.db,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            poll_seconds=settings.idle_poll_seconds,
            links=self.links,
        )
        self.hub = EventHub(self.db, settings.watch_queue_max, settings.watch_queue_max_bytes)
        self.withdrawals = Withdrawals(
            self.db, clock, sent_messages=message_updates.SentMessageUpdates()
        )
        self.telemetry.observe(self.hub)
        # One Watch for gRPC and the console: its stream caps count both.
        self.watch = Watch(
            self.db,
            self.hub,
            settings.watch_heartbeat_seconds,
            clock,
            settings.watch_streams_per_principal,
            settings.watch_streams_max,
        )
        # The queue gauges' query loop, only when some exporter would read it.
        self.queue_sampler = (
            QueueSampler(self.db, self.telemetry.metrics.queue, clock, self.telemetry.poll_seconds)
            if self.telemetry.metrics_enabled
            else None
        )
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
                ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
                ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
                ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
                reuse_port_option(settings.reuse_port),
            ],
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._writer_tasks: list[asyncio.Task[None]] = []  # stopped, not cancelled
        self.ready = asyncio.Event()
        self._fatal: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.port = 0
        self.http: HttpServer | None = None
        self.http_port = 0

    async def start(self) -> None:
        s = self.settings
        if phases.REQUESTED:  # before any task is created: they are the unit of account
            phases.enable()
        # Every handler wrapped once here (spans, load shedding, then the decode guard), not by
        # interceptors on every call. (Any: the generated functions are typed for a
        # grpc Server, and the registrar has only the two methods they call.)
        registrar: Any = WrappingRegistrar(
            self.server, [self.telemetry.rpc_wrapper, self.admission.wrap, decode_guard]
        )
        notification_service_pb2_grpc.add_NotificationServiceServicer_to_server(
            NotificationServicer(
                self.authenticator,
                self.intake,
                Queries(self.db),
                self.acks,
                Operations(self.db, self.clock),
                self.watch,
                self.withdrawals,
            ),
            registrar,
        )
        policy_service_pb2_grpc.add_PolicyServiceServicer_to_server(
            PolicyServicer(self.authenticator, PolicyService(self.db, self.clock)), registrar
        )
        audit_service_pb2_grpc.add_AuditServiceServicer_to_server(
            AuditServicer(AuditTrail(self.db), self.authenticator), registrar
        )
        key_service_pb2_grpc.add_KeyServiceServicer_to_server(
            KeyServicer(self.authenticator, KeyService(self.db, self.clock)), registrar
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
        creds: grpc.ServerCredentials | None = None
        if s.tls_enabled:
            assert s.tls_cert_file and s.tls_key_file
            creds = grpc.ssl_server_credentials(
                [(Path(s.tls_key_file).read_bytes(), Path(s.tls_cert_file).read_bytes())],
                root_certificates=(
                    Path(s.tls_client_ca_file).read_bytes() if s.tls_client_ca_file else None
                ),
                require_client_auth=s.tls_client_ca_file is not None,
            )
        try:
            if creds is not None:
                self.port = self.server.add_secure_port(s.listen, creds)
            else:
                self.port = self.server.add_insecure_port(s.listen)
        except RuntimeError:  # grpc: "Failed to bind to address ..."
            self.port = 0
        if self.port == 0:
            raise SettingsError(bind_failure(s.listen, reuse_port=s.reuse_port))
        await self.server.start()
        if s.metrics_listen:
            try:
                metrics_port = self.telemetry.serve_metrics()
            except OSError as exc:
                raise SettingsError(f"cannot listen on {s.metrics_listen}: {exc}") from exc
            log.info("metrics", extra={"metrics_listen": s.metrics_listen, "port": metrics_port})
        log.info("listening", extra={"listen": s.listen, "port": self.port, "tls": s.tls_enabled})
        log.info(
            "channels configured",
            extra={
                "channels": list(self.channels.names()),
                "channel_fingerprint": self.channel_fingerprint,
            },
        )
        if s.http_enabled:
            await self._start_http()
        self._tasks.append(asyncio.create_task(self._become_ready()))

    async def _start_http(self) -> None:
        """The HTTP surface: same process, same database and services as gRPC."""
        self.http = HttpServer(self.settings, self._http_routes())
        await self.http.start()
        self.http_port = self.http.port
        log.info(
            "http listening",
            extra={
                "http_listen": self.settings.http_listen,
                "port": self.http_port,
                "public_url": self.public_url,
            },
        )
        console_url = self.public_url + "/console/"
        log.info(
            "operator console at %s (sign in with an operator API key)",
            console_url,
            extra={"console_url": console_url},
        )

    def _link_service(self) -> ActionLinkService:
        keys = self.settings.link_keys
        if not keys:  # loopback only (settings refuse it elsewhere)
            keys = (secrets.token_urlsafe(32),)
            log.warning(
                "no --action-link-keys: links are signed with a random key and stop "
                "working when this process exits"
            )
        return ActionLinkService(
            self.db,
            self.acks,
            LinkSigner(keys),
            lambda: self.public_url,
            self.clock,
            lease_seconds=self.settings.lease_seconds,
        )

    def _http_routes(self) -> list[Any]:
        routes: list[Any] = list(http_health.routes(self.ready))
        if self.links is not None:
            routes += http_links.routes(self.links, lambda: self.public_url)
            configs = self.channels_config.channels.values()
            routes += http_integrations.routes(
                ProviderAnswers(self.db, self.acks, self.links, self.clock),
                [
                    c.signing_secret
                    for c in configs
                    if isinstance(c, SlackConfig) and c.signing_secret
                ],
                [
                    c.webhook_secret
                    for c in configs
                    if isinstance(c, PagerDutyConfig) and c.webhook_secret
                ],
            )
        routes += http_console.routes(self._console())
        return routes

    def _console(self) -> http_console.Console:
        """The operator console (/console/): the gRPC API's services, one more Watch
        on the same EventHub for its live views."""
        s = self.settings
        return http_console.Console(
            db=self.db,
            sessions=Sessions(
                self.db,
                self.authenticator,
                self.clock,
                idle=timedelta(minutes=s.console_session_idle_minutes),
                absolute=timedelta(hours=s.console_session_absolute_hours),
            ),
            queries=Queries(self.db),
            operations=Operations(self.db, self.clock),
            acks=self.acks,
            policies=PolicyService(self.db, self.clock),
            watch=self.watch,
            clock=self.clock,
            public_url=lambda: self.public_url,
        )

    @property
    def public_url(self) -> str:
        """The base of every link (``--public-url``, else the HTTP address as bound)."""
        s = self.settings
        if s.public_url or not s.http_listen.endswith(":0") or not self.http_port:
            return s.base_url
        return s.base_url.rpartition(":")[0] + f":{self.http_port}"

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
                if self.db_clock is not None and not self.db_clock.synced:
                    await self.db_clock.sync(self.db)  # before anything is written
                if s.auto_migrate:
                    await migrate.upgrade(self.db)
                if not await migrate.is_migrated(self.db):
                    log.error("database schema is not at head; run `uns-admin migrate`")
                else:
                    await self._check_auth_setup()
                    risk = await durability.failover_risk(self.db)
                    if risk:
                        log.warning("database failover may lose data: %s", risk)
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
        if self.db_clock is not None and self.db.is_postgres:
            self._tasks.append(asyncio.create_task(self.db_clock.run(self.db)))
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
                asyncio.create_task(self.message_updater.run()),
                asyncio.create_task(self.followups.run()),
            ]
            self._tasks.extend(self._writer_tasks)
        self._tasks.append(asyncio.create_task(self._monitor()))
        if self.queue_sampler is not None:
            self._tasks.append(asyncio.create_task(self.queue_sampler.run()))

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
        """Health follows the database (a ``SELECT 1`` every HEALTH_CHECK_SECONDS) and
        the workers (``Supervision``: repeated storage faults in dispatch or the
        expiry sweep, reported as they happen)."""
        serving = reachable = True
        changed = self.supervision.changed
        while True:
            if not await wait_event(changed, HEALTH_CHECK_SECONDS):
                was = reachable
                try:
                    async with asyncio.timeout(HEALTH_CHECK_SECONDS):
                        await self.db.ping()
                    reachable = True
                except Exception:
                    reachable = False
                if reachable != was:
                    log.warning("database %s", "reachable again" if reachable else "unreachable")
            changed.clear()
            failing = self.supervision.unhealthy
            ok = reachable and not failing
            if ok != serving:
                serving = ok
                await self._set_health(serving=ok)
                log.warning(
                    "health %s", "SERVING" if ok else "NOT_SERVING", extra={"failing": failing}
                )

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
        self.message_updater.stop()
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
        if self.http is not None:
            await self.http.stop()
        await self.channels.aclose()
        await self.db.dispose()
        await self.telemetry.aclose()
