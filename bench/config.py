"""How big and how long each workload runs: one frozen profile per mode.

Every loop in the benchmark is bounded twice, by a count and by a duration, so a slow
machine gives smaller samples instead of a run that never ends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    # accept / echo / pgbench: closed-loop producers per level, seconds per level.
    concurrency: tuple[int, ...]
    seconds: float
    warmup_seconds: float
    max_ops: int
    # deliver: producers, send window, how long to wait for the tail; paced latency run.
    deliver_producers: int
    deliver_seconds: float
    deliver_max: int
    deliver_wait_seconds: float
    paced_rate: float
    paced_seconds: float
    # watch: subscriber counts; events per level; the RSS figure is taken at the largest.
    # An event's copies arrive together, so one late event is 1/watch_events of the
    # samples: with too few events the p99 is the slowest event's delay.
    watch_subscribers: tuple[int, ...]
    watch_events: int
    # drain: backlog size and the longest we wait for it.
    drain_backlog: int
    drain_cap_seconds: float
    # growth: history rows cloned before the second measurement.
    growth_history: int
    growth_seconds: float
    # peer queue (procrastinate): jobs deferred then processed.
    peer_jobs: int
    peer_cap_seconds: float
    # ghz (outside load generator) and the webhook baseline: levels, seconds per level,
    # and the longest wait for a level's notifications to be delivered.
    ghz_concurrency: tuple[int, ...] = (1, 16)
    ghz_seconds: float = 2.5
    ghz_warmup_seconds: float = 0.5
    ghz_drain_seconds: float = 30.0
    # --before: rounds of (before, after) windows per UNS row and level (--pairs).
    ghz_pairs: int = 2
    # console: notifications in its database, measured requests per page, idle window.
    console_notifications: int = 100_000
    console_requests: int = 20
    console_idle_seconds: float = 20.0
    # PostgreSQL reports an idle backend's transactions up to 10 s late.
    console_stats_settle_seconds: float = 11.0
    # batch: BatchSendNotifications of batch_size items from batch_producers closed-loop
    # producers until batch_items are accepted (or the cap); the same items are then the
    # drain's backlog, and River inserts and works as many jobs.
    batch_size: int = 500
    batch_producers: int = 4
    batch_items: int = 20_000
    batch_cap_seconds: float = 60.0
    batch_drain_cap_seconds: float = 120.0


QUICK = Profile(
    name="quick",
    concurrency=(1, 16, 64),
    seconds=2.5,
    warmup_seconds=0.5,
    max_ops=20_000,
    deliver_producers=16,
    deliver_seconds=2.0,
    deliver_max=1_500,
    deliver_wait_seconds=20.0,
    paced_rate=25.0,
    paced_seconds=2.0,
    watch_subscribers=(1, 100, 300),
    watch_events=12,
    drain_backlog=600,
    drain_cap_seconds=15.0,
    growth_history=30_000,
    growth_seconds=2.5,
    peer_jobs=1_000,
    peer_cap_seconds=15.0,
)

FULL = Profile(
    name="full",
    concurrency=(1, 16, 64),
    seconds=12.0,
    warmup_seconds=1.0,
    max_ops=200_000,
    deliver_producers=16,
    deliver_seconds=10.0,
    deliver_max=10_000,
    deliver_wait_seconds=90.0,
    paced_rate=25.0,
    paced_seconds=8.0,
    watch_subscribers=(1, 100, 1000),
    watch_events=100,
    drain_backlog=100_000,
    drain_cap_seconds=300.0,
    growth_history=1_000_000,
    growth_seconds=10.0,
    peer_jobs=5_000,
    peer_cap_seconds=60.0,
    ghz_seconds=12.0,
    ghz_warmup_seconds=1.0,
    ghz_drain_seconds=120.0,
    ghz_pairs=3,
    console_notifications=1_000_000,
    batch_items=100_000,
    batch_cap_seconds=300.0,
    batch_drain_cap_seconds=300.0,
)

# Seconds, not minutes: every workload at a token size, to check that the bench runs
# end to end (figures from it are noise).
SMOKE = Profile(
    name="smoke",
    concurrency=(1, 16),
    seconds=0.5,
    warmup_seconds=0.1,
    max_ops=500,
    deliver_producers=4,
    deliver_seconds=0.5,
    deliver_max=100,
    deliver_wait_seconds=10.0,
    paced_rate=20.0,
    paced_seconds=0.5,
    watch_subscribers=(1, 10),
    watch_events=4,
    drain_backlog=100,
    drain_cap_seconds=10.0,
    growth_history=2_000,
    growth_seconds=0.5,
    peer_jobs=100,
    peer_cap_seconds=10.0,
    ghz_seconds=0.5,
    ghz_warmup_seconds=0.1,
    ghz_drain_seconds=10.0,
    ghz_pairs=1,
    console_notifications=300,
    console_requests=2,
    console_idle_seconds=1.0,
    console_stats_settle_seconds=0.0,
    batch_size=50,
    batch_producers=2,
    batch_items=300,
    batch_cap_seconds=20.0,
    batch_drain_cap_seconds=30.0,
)
