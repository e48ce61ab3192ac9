"""Metrics (OpenTelemetry instruments, exported to Prometheus and/or OTLP).

Counters are incremented where the outcome is decided, after its transaction
committed (intake, dispatch settle, acknowledgements, the expiry sweep): the hot path
never re-reads the database for a metric. Two kinds of value are *observed* instead:

- the queue (depth by state, age of the oldest due item, WatchEvents hub lag) comes
  from one cheap aggregate over the partial index ``ix_uns_notifications_due``, run by
  ``workers.queue_sampler`` every ``metrics_poll_seconds`` — never per call, never per
  scrape — which hands the numbers to ``QueueStats`` (``queue_metrics``);
- WatchEvents streams and their lag are read from the in-process ``EventHub`` at
  collection time, no I/O (``watch_metrics``).

This module holds the outcome counters and histograms and composes the gauges;
``prometheus`` serves the scrape endpoint.

Prometheus names (units become suffixes: ``s`` -> ``_seconds``; counters get ``_total``):

- ``uns_notifications_accepted_total{outcome=new|coalesced|deduplicated}``
- ``uns_notifications_idempotent_replays_total``
- ``uns_intake_group_size`` (histogram, SendNotification calls per intake transaction:
  group commit at work)
- ``uns_notifications_deduplicated_total{stage=intake|dispatch}``
- ``uns_notifications_delivered_total``, ``uns_notifications_failed_total{delivery_mode}``,
  ``uns_notifications_dead_lettered_total``
- ``uns_dispatch_retries_total``, ``uns_dispatch_lease_lost_total``
- ``uns_dispatch_latency_seconds{status}`` (histogram, accept -> final settlement)
- ``uns_dispatch_attempt_duration_seconds{outcome}`` (histogram, one attempt)
- ``uns_channel_send_duration_seconds{channel,result}`` (histogram, one adapter call)
- ``uns_acks_total{state=ACKED|DISMISSED}``, ``uns_ack_timeouts_total``
- ``uns_queue_depth{state=due|leased|scheduled}``, ``uns_queue_oldest_due_age_seconds``
- ``uns_watch_streams``, ``uns_watch_lag{stat=max|sum}``, ``uns_watch_hub_lag``,
  ``uns_watch_overflows_total``
- ``uns_phase_cpu_seconds_total{phase}``, only with UNS_PHASE_CPU=1 (``phases``)
- ``uns_channel_config_info{fingerprint,channels}`` (always 1: which channels this
  replica can deliver, ``channels.fingerprint``)
- ``uns_requests_shed_total{limit=principal|concurrent_rpcs|failed_authentications}``
  (calls refused with RATE_LIMITED before the server acted on them)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, NoOpMeterProvider, Observation

from uns_server.domain.enums import Status
from uns_server.observability import phases
from uns_server.observability.queue_metrics import QueueStats, register_queue_gauges
from uns_server.observability.watch_metrics import HubGauges, WatchGauges

# Named here too: callers read the queue sample and describe the hub through this module.
__all__ = ["METER_NAME", "HubGauges", "Metrics", "QueueStats"]

log = logging.getLogger("uns.metrics")

METER_NAME = "uns_server"
# accept -> settle spans retries with backoff: from sub-second to a day.
LATENCY_BUCKETS_SECONDS = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4 * 3600.0,
    24 * 3600.0,
)
# One attempt or one provider call: bounded by the lease (default 60 s).
ATTEMPT_BUCKETS_SECONDS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# Calls per intake transaction: bounded by the group commit's largest group (128).
GROUP_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    """The service's instruments, and one method per decided outcome."""

    def __init__(self, meter: Meter) -> None:
        m = self._meter = meter
        self._accepted = m.create_counter(
            "uns.notifications.accepted",
            unit="{notification}",
            description="Notifications accepted by SendNotification "
            "(outcome: new, coalesced behind a pending leader, or deduplicated at once).",
        )
        self._replays = m.create_counter(
            "uns.notifications.idempotent_replays",
            unit="{request}",
            description="SendNotification calls answered with an existing notification.",
        )
        self._deduplicated = m.create_counter(
            "uns.notifications.deduplicated",
            unit="{notification}",
            description="Notifications that became DEDUPLICATED "
            "(stage: intake, or dispatch when their leader was delivered).",
        )
        self._delivered = m.create_counter(
            "uns.notifications.delivered",
            unit="{notification}",
            description="Delivery cycles settled DELIVERED (every channel accepted).",
        )
        self._failed = m.create_counter(
            "uns.notifications.failed",
            unit="{notification}",
            description="Delivery cycles settled FAILED (permanent error or attempts exhausted).",
        )
        self._dead_lettered = m.create_counter(
            "uns.notifications.dead_lettered",
            unit="{notification}",
            description="FAILED GUARANTEED notifications put on the dead-letter queue.",
        )
        self._retries = m.create_counter(
            "uns.dispatch.retries",
            unit="{attempt}",
            description="Attempts that ended with a retry scheduled (transient failure).",
        )
        self._lease_lost = m.create_counter(
            "uns.dispatch.lease_lost",
            unit="{attempt}",
            description="Attempts whose lease expired before they could settle.",
        )
        self._group = m.create_histogram(
            "uns.intake.group.size",
            description="SendNotification calls committed in one intake transaction.",
            explicit_bucket_boundaries_advisory=GROUP_SIZE_BUCKETS,
        )
        self._latency = m.create_histogram(
            "uns.dispatch.latency",
            unit="s",
            description="From acceptance to the final settlement (DELIVERED or FAILED).",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_SECONDS,
        )
        self._attempt = m.create_histogram(
            "uns.dispatch.attempt.duration",
            unit="s",
            description="One dispatch attempt, provider calls to settlement "
            "(outcome: delivered, retry, failed, lease_lost, error).",
            explicit_bucket_boundaries_advisory=ATTEMPT_BUCKETS_SECONDS,
        )
        self._channel = m.create_histogram(
            "uns.channel.send.duration",
            unit="s",
            description="One channel adapter call (result: success, transient, permanent).",
            explicit_bucket_boundaries_advisory=ATTEMPT_BUCKETS_SECONDS,
        )
        self._acks = m.create_counter(
            "uns.acks",
            unit="{acknowledgement}",
            description="Acknowledgements settled by a responder (state: ACKED, DISMISSED).",
        )
        self._ack_timeouts = m.create_counter(
            "uns.ack.timeouts",
            unit="{acknowledgement}",
            description="Pending acknowledgements the expiry sweep moved to TIMED_OUT.",
        )
        self._shed = m.create_counter(
            "uns.requests.shed",
            unit="{request}",
            description="Calls refused with RATE_LIMITED before the server acted (limit).",
        )
        self.queue = QueueStats()
        register_queue_gauges(m, self.queue)
        self._watch = WatchGauges(m, self.queue)
        self._channel_config: tuple[str, str] | None = None
        m.create_observable_gauge(
            "uns.channel_config.info",
            callbacks=[self._observe_channel_config],
            description="Always 1, labelled with this replica's channel configuration: "
            "fingerprint (of channel names and types) and channels (their names). "
            "Replicas with different fingerprints can take different work.",
        )

    @classmethod
    def noop(cls) -> Metrics:
        return cls(NoOpMeterProvider().get_meter(METER_NAME))

    def observe_watch(self, hub: HubGauges) -> None:
        self._watch.hub = hub

    def channel_config(self, fingerprint: str, channels: Iterable[str]) -> None:
        self._channel_config = (fingerprint, ",".join(sorted(channels)))

    # -- outcomes (called after the deciding transaction committed) -------------

    def accepted(self, outcome: str) -> None:
        self._accepted.add(1, {"outcome": outcome})
        if outcome == "deduplicated":
            self._deduplicated.add(1, {"stage": "intake"})

    def idempotent_replay(self) -> None:
        self._replays.add(1)

    def intake_group(self, size: int) -> None:
        self._group.record(size)

    def settled(
        self,
        status: Status | None,
        *,
        dead_letter: bool,
        delivery_mode: str,
        followers_deduplicated: int,
        accept_to_settle_seconds: float,
    ) -> None:
        """One attempt settled: ``status`` None means the lease was lost."""
        if status is None:
            self._lease_lost.add(1)
        elif status == Status.DELIVERED:
            self._delivered.add(1)
            self._latency.record(accept_to_settle_seconds, {"status": status.value})
        elif status == Status.FAILED:
            self._failed.add(1, {"delivery_mode": delivery_mode})
            if dead_letter:
                self._dead_lettered.add(1)
            self._latency.record(accept_to_settle_seconds, {"status": status.value})
        else:
            self._retries.add(1)
        if followers_deduplicated:
            self._deduplicated.add(followers_deduplicated, {"stage": "dispatch"})

    def attempt(self, outcome: str, seconds: float) -> None:
        self._attempt.record(seconds, {"outcome": outcome})

    def channel_send(self, channel: str, result: str, seconds: float) -> None:
        self._channel.record(seconds, {"channel": channel, "result": result})

    def acknowledged(self, state: str) -> None:
        self._acks.add(1, {"state": state})

    def ack_timeouts(self, count: int) -> None:
        if count:
            self._ack_timeouts.add(count)

    def shed(self, limit: str) -> None:
        self._shed.add(1, {"limit": limit})

    # -- observations (collection time: in-memory reads only) -------------------

    def observe_phases(self) -> None:
        """``uns_phase_cpu_seconds_total{phase}``, with UNS_PHASE_CPU=1 (observability.phases)."""
        self._meter.create_observable_counter(
            "uns.phase.cpu",
            callbacks=[_observe_phases],
            unit="s",
            description="CPU of this process by pipeline phase since start "
            "(UNS_PHASE_CPU=1 only; for benchmarks).",
        )

    def _observe_channel_config(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self._channel_config is None:
            return []
        fingerprint, channels = self._channel_config
        return [Observation(1, {"fingerprint": fingerprint, "channels": channels})]


def _observe_phases(_options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(cpu, {"phase": name}) for name, cpu in phases.snapshot().items()]
