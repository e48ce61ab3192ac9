"""Composition root: settings -> database -> services -> workers -> gRPC server.

Start-up never crashes on a database that is down: the server listens at once with
health NOT_SERVING, retries the connection (and migration) in the background
(``readiness``), and turns SERVING only when the schema is at head. A monitor
(``health``) flips health back to NOT_SERVING while the database is unreachable.
The gRPC and HTTP surfaces are wired in ``grpc_surface`` and ``http_surface``.

Size: the one place that builds every store, service and worker in start-up order;
the next worker it gains should move the workers' wiring into a module of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Callable
from datetime import datetime

from opentelemetry.trace import TracerProvider as ApiTracerProvider

from uns_server.api.admission import CallAdmission
from uns_server.api.bind import bind_failure
from uns_server.api.front import GrpcFront
from uns_server.app import config_files, descriptors, grpc_surface, http_surface, readiness
from uns_server.app.health import HealthMonitor
from uns_server.app.operator_services import OperatorServices
from uns_server.channels.config import load_channels_config
from uns_server.channels.fingerprint import channel_fingerprint
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain.jobs import JobKind
from uns_server.domain.policy import ServerDefaults
from uns_server.http.connect import Bridge
from uns_server.http.server import HttpServer
from uns_server.observability import phases
from uns_server.observability.telemetry import Telemetry
from uns_server.services import auth, message_updates
from uns_server.services.acks import AckService
from uns_server.services.connection_caps import ConnectionCaps
from uns_server.services.heartbeat_deadlines import HeartbeatDeadlines
from uns_server.services.heartbeats import HeartbeatService
from uns_server.services.intake import Intake
from uns_server.services.maintenance import OpenWindows
from uns_server.services.rate_limits import TokenBuckets
from uns_server.services.snooze import Snoozes
from uns_server.services.watch import EventHub, Watch
from uns_server.services.withdrawal import Withdrawals
from uns_server.settings import Settings, SettingsError
from uns_server.store.clock import DatabaseClock, host_clock
from uns_server.store.db import TOPIC_EVENTS, TOPIC_WORK, Database
from uns_server.store.listen import listen_forever
from uns_server.store.port import TOPIC_MAINTENANCE
from uns_server.store.sql_store import SqlStore
from uns_server.workers.dispatch import Dispatcher
from uns_server.workers.followups import FollowUpWorker
from uns_server.workers.job_cleaner import JobCleaner
from uns_server.workers.loop import LoopWorker
from uns_server.workers.maintenance import MaintenanceWorker
from uns_server.workers.message_updates import MessageUpdater
from uns_server.workers.person_rules import PersonRuleWorker
from uns_server.workers.queue_sampler import QueueSampler
from uns_server.workers.receipts import ReceiptPruner
from uns_server.workers.rescuer import JobRescuer
from uns_server.workers.statistics import FirstAnalyze
from uns_server.workers.supervision import Supervision
from uns_server.workers.timers import TimerWorker
from uns_server.workers.undeliverable import UndeliverableWatch

log = logging.getLogger("uns.server")


class App:
    def __init__(
        self,
        settings: Settings,
        environ: dict[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        tracer_provider: ApiTracerProvider | None = None,
        instance: str = "",
    ) -> None:
        """``clock`` replaces the database's (``store.clock``; tests move time with it);
        ``tracer_provider`` the one the settings describe (tests capture spans in
        memory with it); ``instance`` names one child of ``--processes N`` in
        telemetry."""
        self.settings = settings
        self.db_clock = DatabaseClock(host_clock(environ)) if clock is None else None
        clock = clock or self.db_clock
        assert clock is not None
        self.clock = clock
        self.db = Database(
            settings.database_url,
            command_timeout=settings.db_command_timeout_seconds,
            listen_url=settings.listen_database_url or None,
            keepalive_seconds=settings.db_keepalive_seconds,
        )
        # What every service and worker is handed: the store port over this database.
        self.store = SqlStore(self.db)
        key_file = None
        if settings.api_keys_file:
            path = settings.api_keys_file
            key_file = config_files.load(
                path, "api_keys_file", lambda data: auth.key_file_from(data, path)
            )
        self.authenticator = auth.Authenticator(
            self.store,
            key_file,
            failed_lookups=TokenBuckets(
                settings.auth_failures_per_second, settings.auth_failure_burst
            ),
        )
        self._key_file = key_file
        if settings.channels_file:
            self.channels_config = config_files.load(
                settings.channels_file,
                "channels_file",
                lambda data: load_channels_config(data or {}, environ),
            )
        else:
            self.channels_config = load_channels_config({}, environ)
        self.channels = ChannelRegistry.from_config(self.channels_config)
        self.channel_fingerprint = channel_fingerprint(self.channels_config)
        self.telemetry = Telemetry.from_settings(settings, tracer_provider, instance=instance)
        if phases.REQUESTED:
            self.telemetry.metrics.observe_phases()
        self.telemetry.metrics.channel_config(self.channel_fingerprint, self.channels.names())
        # Repeated storage faults of the workers turn health NOT_SERVING (``HealthMonitor``).
        self.supervision = Supervision()
        self.health = HealthMonitor(self.db, self.supervision)
        self.acks = AckService(self.store, clock, self.telemetry.metrics)
        self.snoozes = Snoozes(self.store, clock)
        self.links = http_surface.link_service(self) if settings.http_enabled else None
        self.admission = CallAdmission(
            self.authenticator,
            TokenBuckets(
                settings.rate_limit_per_second,
                settings.rate_limit_burst,
                settings.principal_rate_limits(),
            ),
            settings.max_concurrent_rpcs,
            self.telemetry.metrics,
            settings.max_concurrent_rpcs_per_principal,
        )
        # Maintenance windows in memory (reloaded when one changes): intake and the
        # claim hold what they cover without a read; their worker ends them.
        self.windows = OpenWindows(self.store, clock)
        self.dispatcher = Dispatcher(
            self.store,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            batch_size=settings.dispatch_batch_size,
            concurrency=settings.dispatch_concurrency,
            channel_concurrency=settings.dispatch_channel_concurrency,
            max_throttle_deferrals=settings.dispatch_max_throttle_deferrals,
            idle_poll_seconds=settings.idle_poll_seconds,
            telemetry=self.telemetry,
            supervision=self.supervision,
            links=self.links,
            windows=self.windows,
        )
        self.intake = Intake(
            self.store,
            ServerDefaults(channels=self._default_channels()),
            clock,
            self.telemetry.metrics,
            handoff=self.dispatcher,
            channel_types=self.channels_config.types,
            windows=self.windows,
        )
        self.maintenance = MaintenanceWorker(self.windows, settings.idle_poll_seconds)
        # Sent messages show how the obligation ended (Slack chat.update, PagerDuty
        # acknowledge/resolve): queued with every settlement, sent by this worker.
        self.acks.settle_hooks.append(message_updates.queue_on_settle)
        self.message_updater = MessageUpdater(
            self.store,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            idle_poll_seconds=settings.idle_poll_seconds,
            supervision=self.supervision,
        )
        # Provider-callback receipts past the window in which a replay is refused.
        self.receipts = ReceiptPruner(self.store, clock)
        # Final rows of the work table, once old.
        self.job_cleaner = JobCleaner(self.store, clock)
        # Reminders and escalation steps of pending acks (policy reminder/escalation).
        self.followups = FollowUpWorker(
            self.store,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            poll_seconds=settings.idle_poll_seconds,
            links=self.links,
            supervision=self.supervision,
        )
        # People's staged rules (Recipient.notification_rules): each later contact.
        self.person_rules = PersonRuleWorker(
            self.store,
            self.channels,
            clock,
            lease_seconds=settings.lease_seconds,
            poll_seconds=settings.idle_poll_seconds,
            links=self.links,
            supervision=self.supervision,
        )
        self.hub = EventHub(self.store, settings.watch_queue_max, settings.watch_queue_max_bytes)
        self.withdrawals = Withdrawals(
            self.store, clock, sent_messages=message_updates.SentMessageUpdates()
        )
        # Heartbeats (SPEC §7): beats end pages through the withdrawals; silences page.
        self.heartbeats = HeartbeatService(self.store, clock, self.withdrawals)
        # Every timer (ack deadlines, snooze ends, heartbeat deadlines, windows' ends):
        # one claim, fired and completed in one transaction.
        self.timers = TimerWorker(
            self.store,
            clock,
            settings.expiry_poll_seconds,
            self.supervision,
            acks=self.acks,
            snoozes=self.snoozes,
            heartbeats=HeartbeatDeadlines(self.intake),
        )
        # The work table's one rescuer: expired leases of every kind due again.
        self.rescuer = JobRescuer(self.store, clock, settings.idle_poll_seconds, self.supervision)
        for worker in (self.message_updater, self.followups, self.person_rules):
            self.rescuer.on_rescued(worker.kinds, worker.wake)
        # A rescued delivery is claimed again as a recovery (its lease expired unsettled).
        self.rescuer.on_rescued([JobKind.DELIVERY], self.dispatcher.wake)
        self.telemetry.observe(self.hub)
        # One Watch for gRPC and the console: its stream caps count both.
        self.watch = Watch(
            self.store,
            self.hub,
            settings.watch_heartbeat_seconds,
            clock,
            settings.watch_streams_per_principal,
            settings.watch_streams_max,
        )
        # The services the gRPC API and the console share (one configuration for both).
        self.operator = OperatorServices.build(self)
        # The queue gauges' query loop, only when some exporter would read it.
        self.queue_sampler = (
            QueueSampler(
                self.store, self.telemetry.metrics.queue, clock, self.telemetry.poll_seconds
            )
            if self.telemetry.metrics_enabled
            else None
        )
        # Due work for channels this server lacks: a gauge and a log line (SPEC §6).
        self.undeliverable = UndeliverableWatch(
            self.store, self.channels.names(), self.telemetry.metrics.queue, clock
        )
        # Each listener's cap on client connections, both below the open-file limit
        # (raised here), with descriptors kept for the database and the rest.
        self.max_connections = descriptors.connection_cap(
            settings.max_connections, descriptors.raise_limit()
        )
        self.server = grpc_surface.server(settings, self.max_connections)
        self.front: GrpcFront | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._writer_tasks: list[asyncio.Task[None]] = []  # stopped, not cancelled
        self.ready = asyncio.Event()
        self._fatal: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.port = 0
        self.http: HttpServer | None = None
        self.http_port = 0
        self.bridge: Bridge | None = None
        self.bridge_target = ""
        self._bridge_dir: str | None = None

    def _default_channels(self) -> tuple[str, ...]:
        """``default_channels``, each a channel this server has (as a policy's must be)."""
        names = self.settings.default_channel_names
        missing = [n for n in names if n not in self.channels]
        if missing:
            raise SettingsError(
                f"default_channels names {', '.join(missing)}, which this server does not "
                f"have (its channels: {', '.join(self.channels.names())})"
            )
        return names

    async def start(self) -> None:
        s = self.settings
        if phases.REQUESTED:  # before any task is created: they are the unit of account
            phases.enable()
        grpc_surface.add_services(self)
        await self.health.set(serving=False)
        creds = grpc_surface.credentials(s)
        # The public port's front counts connections per address and relays to gRPC on
        # a private socket (``api.front``); without a per-address cap gRPC listens itself.
        fronted = s.grpc_max_connections_per_peer > 0 and not s.listen.startswith("unix")
        address = f"unix:{self._private_dir()}/grpc.sock" if fronted else s.listen
        try:
            if creds is not None:
                self.port = self.server.add_secure_port(address, creds)
            else:
                self.port = self.server.add_insecure_port(address)
        except RuntimeError:  # grpc: "Failed to bind to address ..."
            self.port = 0
        if self.port == 0:
            raise SettingsError(bind_failure(s.listen, reuse_port=s.reuse_port))
        if s.http_enabled:
            self._bridge_socket()
        await self.server.start()
        if fronted:
            await self._start_front(address.removeprefix("unix:"))
        if s.metrics_listen:
            try:
                metrics_port = self.telemetry.serve_metrics()
            except OSError as exc:
                raise SettingsError(
                    f"cannot listen on {s.metrics_listen} for metrics: {exc.strerror or exc} "
                    "(choose another address with --metrics-listen, UNS_METRICS_LISTEN)"
                ) from exc
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

    def _private_dir(self) -> str:
        """A directory only this user can enter (mkdtemp's mode 0700) for the private
        sockets: the front's and the bridge's."""
        if self._bridge_dir is None:
            self._bridge_dir = tempfile.mkdtemp(prefix="uns-bridge-")
        return self._bridge_dir

    async def _start_front(self, target: str) -> None:
        s = self.settings
        caps = ConnectionCaps(s.grpc_max_connections_per_peer, self.max_connections)
        self.front = GrpcFront(target, caps)
        host, _, port = s.listen.rpartition(":")
        try:
            self.port = await self.front.start(host.strip("[]"), int(port), reuse_port=s.reuse_port)
        except (OSError, ValueError) as exc:
            raise SettingsError(bind_failure(s.listen, reuse_port=s.reuse_port)) from exc

    def _bridge_socket(self) -> None:
        """JSON over HTTP calls this server's gRPC methods over a unix socket in the
        private directory, plaintext even when the public port has TLS; admission
        believes the client address it forwards."""
        self.bridge_target = f"unix:{self._private_dir()}/bridge.sock"
        if self.server.add_insecure_port(self.bridge_target) == 0:
            raise SettingsError(f"cannot listen on {self.bridge_target}")
        if not self.settings.listen.startswith("unix"):
            self.admission.trust_forwarded_peer()

    async def _start_http(self) -> None:
        """The HTTP surface: same process, same database and services as gRPC."""
        self.http = HttpServer(self.settings, http_surface.routes(self), self.max_connections)
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

    async def _become_ready(self) -> None:
        s = self.settings
        try:
            await readiness.connect_and_migrate(
                self.db,
                s,
                self.clock,
                db_clock=self.db_clock,
                has_key_file=self._key_file is not None,
            )
        except SettingsError as exc:
            self._fatal.set_result(str(exc))
            return
        await self.hub.start()
        if self.db_clock is not None and self.db.is_postgres:
            self._tasks.append(asyncio.create_task(self.db_clock.run(self.db)))
        if self.db.is_postgres:
            self._tasks.append(
                asyncio.create_task(
                    listen_forever(self.db, (TOPIC_EVENTS, TOPIC_WORK, TOPIC_MAINTENANCE))
                )
            )
            self._tasks.append(asyncio.create_task(FirstAnalyze(self.store).run()))
        await self.windows.refresh()  # before the first send or claim asks them
        await self.health.set(serving=True)
        self.ready.set()
        log.info("ready: database reachable and migrated")
        if s.dispatch_enabled:
            self._writer_tasks = [asyncio.create_task(w.run()) for w in self.writers]
            self._tasks.extend(self._writer_tasks)
            self._tasks.append(asyncio.create_task(self.undeliverable.run()))  # reads only
        self._tasks.append(asyncio.create_task(self.health.run()))
        if self.queue_sampler is not None:
            self._tasks.append(asyncio.create_task(self.queue_sampler.run()))

    @property
    def writers(self) -> tuple[LoopWorker, ...]:
        """The workers that write (all but the receipt pruner and the job cleaner
        ``required``: they report to ``Supervision``); on shutdown they are stopped
        between rounds, not cancelled inside one."""
        return (
            self.dispatcher,
            self.timers,
            self.message_updater,
            self.followups,
            self.person_rules,
            self.rescuer,
            self.receipts,
            self.job_cleaner,
            self.maintenance,
        )

    async def stop(self, grace: float | None = None) -> None:
        grace = self.settings.shutdown_grace_seconds if grace is None else grace
        log.info("shutting down", extra={"grace_seconds": grace})
        await self.health.set(serving=False)
        # End watch streams first, with a resumable UNAVAILABLE, so the drain below
        # waits only for unary calls.
        await self.hub.close()
        # Writers finish their current transaction instead of being cancelled inside
        # it; whatever is still running after the grace period is cancelled.
        for worker in self.writers:
            worker.stop()
        writers = [t for t in self._writer_tasks if not t.done()]
        if writers:
            await asyncio.wait(writers, timeout=grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Stops accepting at once, lets in-flight calls finish within the grace.
        if self.front is not None:
            self.front.stop_accepting()
        await self.server.stop(grace)
        if self.front is not None:
            await self.front.stop()
        if self.http is not None:
            await self.http.stop()
        if self.bridge is not None:
            await self.bridge.close()
        if self._bridge_dir is not None:
            shutil.rmtree(self._bridge_dir, ignore_errors=True)
        await self.channels.aclose()
        await self.db.dispose()
        await self.telemetry.aclose()
