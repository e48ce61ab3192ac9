"""The queue gauges: ``uns_queue_depth{state=due|leased|scheduled}``,
``uns_queue_oldest_due_age_seconds`` and ``uns_undeliverable_due_notifications{channel}``
(written by ``workers.undeliverable``).

The numbers come from one cheap aggregate over the partial index
``ix_uns_notifications_due``, run by ``workers.queue_sampler`` every
``metrics_poll_seconds`` (never per call, never per scrape), which writes them into
``QueueStats``; collection only reads that sample.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from opentelemetry.metrics import CallbackOptions, Meter, Observation


@dataclass
class QueueStats:
    """The last queue sample; plain values, safe to read from an exporter thread."""

    sampled: bool = False
    due: int = 0
    leased: int = 0
    scheduled: int = 0
    oldest_due_age_seconds: float = 0.0
    high_water: int | None = None
    # Due work naming a channel this server lacks, by that channel
    # (``workers.undeliverable``); {} until its first scan.
    undeliverable: dict[str, int] = field(default_factory=dict)


def register_queue_gauges(meter: Meter, queue: QueueStats) -> None:
    def observe_depth(_options: CallbackOptions) -> Iterable[Observation]:
        if not queue.sampled:
            return []
        return [
            Observation(queue.due, {"state": "due"}),
            Observation(queue.leased, {"state": "leased"}),
            Observation(queue.scheduled, {"state": "scheduled"}),
        ]

    def observe_oldest(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(queue.oldest_due_age_seconds)] if queue.sampled else []

    meter.create_observable_gauge(
        "uns.queue.depth",
        callbacks=[observe_depth],
        unit="{notification}",
        description="Pending leaders by state: due (claimable now), leased (being "
        "delivered), scheduled (backing off). Sampled every metrics_poll_seconds.",
    )

    def observe_undeliverable(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, {"channel": c}) for c, v in sorted(queue.undeliverable.items())]

    meter.create_observable_gauge(
        "uns.undeliverable_due_notifications",
        callbacks=[observe_undeliverable],
        unit="{notification}",
        description="Notifications due for over a minute whose policy names this channel, "
        "which this server lacks and no replica has claimed (SPEC 6).",
    )
    meter.create_observable_gauge(
        "uns.queue.oldest_due_age",
        callbacks=[observe_oldest],
        unit="s",
        description="How long the oldest claimable item has been due (0 when none).",
    )
