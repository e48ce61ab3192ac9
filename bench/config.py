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
)
