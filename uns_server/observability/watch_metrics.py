"""The WatchEvents gauges, read from the in-process hub at collection time (no I/O):
``uns_watch_streams``, ``uns_watch_lag{stat=max|sum}``, ``uns_watch_hub_lag`` (committed
events the hub has not read yet, from the queue sample) and ``uns_watch_overflows_total``.

Observability receives numbers only: the hub is described here as a Protocol, never
imported from services.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from uns_server.observability.queue_metrics import QueueStats


class WatchStream(Protocol):
    """What the lag gauges read of one live WatchEvents stream."""

    @property
    def queue(self) -> Sequence[object]: ...
    @property
    def queue_max(self) -> int: ...
    @property
    def overflowed(self) -> bool: ...


class HubGauges(Protocol):
    """What the watch gauges read of the in-process hub (``services.watch.EventHub``)."""

    @property
    def subscribers(self) -> int: ...
    @property
    def tail(self) -> int: ...
    @property
    def total_overflows(self) -> int: ...
    def subscriptions(self) -> Sequence[WatchStream]: ...


class WatchGauges:
    """Observes ``hub`` once the composition root hands it over (``Metrics.observe_watch``)."""

    def __init__(self, meter: Meter, queue: QueueStats) -> None:
        self.hub: HubGauges | None = None
        self._queue = queue
        meter.create_observable_gauge(
            "uns.watch.streams",
            callbacks=[self._observe_streams],
            unit="{stream}",
            description="Open WatchEvents streams on this process.",
        )
        meter.create_observable_gauge(
            "uns.watch.lag",
            callbacks=[self._observe_lag],
            unit="{event}",
            description="Events read by the hub but not yet sent, per stream (stat: max, "
            "sum); a stream catching up from the table counts as its full buffer.",
        )
        meter.create_observable_gauge(
            "uns.watch.hub_lag",
            callbacks=[self._observe_hub_lag],
            unit="{event}",
            description="Committed events the hub has not read yet (sampled).",
        )
        meter.create_observable_counter(
            "uns.watch.overflows",
            callbacks=[self._observe_overflows],
            unit="{overflow}",
            description="Times a stream fell behind its buffer and went back to the table.",
        )

    def _observe_streams(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [] if self.hub is None else [Observation(self.hub.subscribers)]

    def _observe_lag(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self.hub is None:
            return []
        lags = stream_lags(self.hub)
        return [
            Observation(max(lags, default=0), {"stat": "max"}),
            Observation(sum(lags), {"stat": "sum"}),
        ]

    def _observe_hub_lag(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self.hub is None or self._queue.high_water is None:
            return []
        return [Observation(max(0, self._queue.high_water - self.hub.tail))]

    def _observe_overflows(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [] if self.hub is None else [Observation(self.hub.total_overflows)]


def stream_lags(hub: HubGauges) -> list[int]:
    """Events each live stream is behind the hub's tail.

    The hub hands each event it reads to the queue of every subscription it matches,
    so a queue's length is how many events that stream has yet to send; a stream whose queue
    overflowed reads from the table again and is at least a full buffer behind.
    ``subscriptions()`` is a copy: collection may run on an exporter thread.
    """
    return [sub.queue_max if sub.overflowed else len(sub.queue) for sub in hub.subscriptions()]
