"""The claiming round: ``Dispatcher`` keeps up to ``concurrency`` deliveries in flight,
run by the shared worker loop (``workers.loop``), claiming due leaders in batches
(``Dispatch.claim`` of the store port, asking ``lifecycle.decide_claim`` about each), and takes
the leases intake hands over (``reserve``, ``lease_new``, ``hand_over``). Each claim
is delivered by ``Sender`` and settled by ``Settler`` (see the package docstring
for the whole attempt)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from uns_server.aio import wait_event
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain import lifecycle
from uns_server.domain.records import Notification
from uns_server.observability.phases import ATTEMPT, CLAIM, DISPATCH_LOOP, phased
from uns_server.observability.telemetry import Telemetry
from uns_server.services.action_links import ActionLinkService
from uns_server.services.maintenance import OpenWindows
from uns_server.store.port import TOPIC_WORK, NewEvent, Store
from uns_server.workers.dispatch.bulkheads import Bulkheads
from uns_server.workers.dispatch.claims import Claim, claim_events, remaining_channels
from uns_server.workers.dispatch.holds import claim_hold
from uns_server.workers.dispatch.sending import Sender
from uns_server.workers.dispatch.settlement import Settled, Settler
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.dispatch")
Clock = Callable[[], datetime]

# A wake-up that brings no sign of new due work (a delivery finished, freeing a slot)
# claims only if the last claim is this old. This bounds how late a retry that fell due
# meanwhile is picked up while deliveries are in flight.
QUIET_RECLAIM_SECONDS = 0.05


@dataclass(frozen=True)
class Claimed:
    claimed: int  # leaders claimed (and delivered, when called alone)
    more: bool = False  # a full claim: more may be due right now
    due_in: float | None = None  # idle: until the next leader falls due


class Dispatcher(LoopWorker):
    name = "dispatch"  # repeated claim faults turn health NOT_SERVING

    def __init__(
        self,
        store: Store,
        channels: ChannelRegistry,
        clock: Clock,
        *,
        lease_seconds: float,
        batch_size: int,
        concurrency: int,
        idle_poll_seconds: float,
        channel_concurrency: int | None = None,
        max_throttle_deferrals: int = lifecycle.THROTTLE_DEFERRALS_MAX_DEFAULT,
        rand: Callable[[], float] = random.random,
        telemetry: Telemetry | None = None,
        supervision: Supervision | None = None,
        links: ActionLinkService | None = None,
        windows: OpenWindows | None = None,
    ) -> None:
        self._store = store
        self._windows = windows  # maintenance windows: what they hold is not attempted
        self._channels = channels
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)
        self._batch = batch_size
        self._concurrency = concurrency
        # Provider calls in flight per channel (None: as many as the slots, no bulkhead).
        self.bulkheads = Bulkheads(channel_concurrency or concurrency)
        super().__init__(idle_poll_seconds, supervision)
        self._idle_poll = idle_poll_seconds
        # While deliveries are in flight, claim again once this many slots are free; no
        # more than a full bulkhead leaves to the other channels (a hanging channel
        # holding its slots must not keep them from the rest).
        self._refill_at = max(1, min(batch_size, concurrency) // 2)
        if self.bulkheads.limit < concurrency:
            self._refill_at = min(self._refill_at, concurrency - self.bulkheads.limit)
        telemetry = telemetry or Telemetry.disabled()
        # Deliveries that finish while a settle transaction is in flight settle
        # together in the next one.
        self.settlement = Settler(
            store,
            clock,
            rand=rand,
            metrics=telemetry.metrics,
            max_throttle_deferrals=max_throttle_deferrals,
        )
        self._sender = Sender(
            channels,
            clock,
            self.settlement,
            lease=self._lease,
            tracer=telemetry.tracer,
            metrics=telemetry.metrics,
            links=links,
            bulkheads=self.bulkheads,
            store=store,
        )
        # Work signals (commits that made work due, here or in another process) counted,
        # and how many of them the last claim's query could see: a signal that came
        # before the claim looked is covered by it, one after may not be.
        self._signals = 0
        self._signals_seen = -1
        self._last_claim = 0.0
        self._more_due = True  # the last claim was full (or failed): claim again
        # The next due time read while idle, the work-signal count it reflects and when
        # it was read (``time.monotonic``).
        self._due_known: tuple[int, datetime | None, float] | None = None
        self._carried_at: datetime | None = None  # the last carry (``_carry``)
        self._idle_poll_delta = timedelta(seconds=idle_poll_seconds)
        # Channel subsets whose last claim found nothing: (work signals, when).
        self._nothing_for: dict[frozenset[str], tuple[int, float]] = {}
        self._all_channels = frozenset(channels.names())
        self._running = False
        self._inflight: set[asyncio.Task[None]] = set()
        # Slots promised to callers that lease new rows themselves (``reserve``).
        self._reserved = 0
        store.on_commit(TOPIC_WORK, self.wake)

    def wake(self) -> None:
        """Due work may have appeared: claim at the next chance."""
        self._signals += 1
        self._wake.set()

    def _found_nothing_for(self, subset: frozenset[str]) -> bool:
        """Did a claim for only these channels (the others' bulkheads full) just find
        nothing, with no work signal since and within an idle poll (work that falls due
        by time alone waits no longer than that)? Such a claim walks every due leader of
        the full channels to find none: on a backlog of one busy channel, 30-40 ms of
        PostgreSQL per refill while its bulkhead stays full."""
        seen = self._nothing_for.get(subset)
        if seen is None:
            return False
        signals, at = seen
        if signals == self._signals and time.monotonic() - at < self._idle_poll:
            return True
        del self._nothing_for[subset]
        return False

    def _claim_worthwhile(self) -> bool:
        """Is a claim worth its transaction now? Not on a wake-up that only says a
        delivery finished, unless the last claim is ``QUIET_RECLAIM_SECONDS`` old (or
        an idle poll: the loop slept that long without a wake-up), or, idle, the next
        due time it slept until has come."""
        known = self._due_known
        return (
            self._more_due
            or self._signals != self._signals_seen
            or time.monotonic() - self._last_claim >= min(QUIET_RECLAIM_SECONDS, self._idle_poll)
            or (
                not self._inflight
                and known is not None
                and known[1] is not None
                and known[1] <= self._clock()
            )
        )

    async def run_once(self) -> Claimed:
        """One round: claim due leaders into the free delivery slots and start their
        deliveries. Under ``run`` they go on in the background (the next round refills
        the slots they free); called alone (tests, one-off tools) it claims whether or
        not a claim looks worthwhile and waits for them, so they are settled on return.
        Idle (nothing in flight), it also reads when the next leader falls due."""
        alone = not self._running
        inflight = self._inflight
        free = self._concurrency - len(inflight) - self._reserved
        claims: list[Claim] = []
        # Refill in batches, not one slot per finished delivery: a claim (and the
        # settlement of what it claimed) costs about the same for 1 row as for 8.
        open_channels = self.bulkheads.open(self._channels.names())
        if (
            free > 0
            and open_channels
            and (not inflight or free >= self._refill_at)
            and (alone or self._claim_worthwhile())
        ):
            # No more rows than the roomiest open channel takes (a full one is passed over).
            room = max(self.bulkheads.room(ch) for ch in open_channels)
            limit = min(free, self._batch, room)
            subset = frozenset(open_channels)
            if alone or not self._found_nothing_for(subset):
                self._more_due = True  # until a claim says otherwise (a failed one does not)
                claims = await self.claim(limit, open_channels)
                self._more_due = len(claims) == limit
                if not claims and subset != self._all_channels:
                    self._nothing_for[subset] = (self._signals_seen, time.monotonic())
            tasks = [self._spawn(c) for c in claims]
            if alone:
                await asyncio.gather(*tasks)
            elif claims and self._more_due:
                return Claimed(len(claims), more=True)  # more may be due right now
        if inflight:
            return Claimed(len(claims))  # a finished delivery wakes the loop
        due = await self._next_due()
        return Claimed(len(claims), due_in=seconds_until(due, self._clock()))

    def stop(self) -> None:
        """Claim nothing more; ``run`` returns once in-flight deliveries have settled.
        (Cancelling instead could interrupt a transaction half-way — on SQLite that
        can leave the write lock held by a connection nobody returns.)"""
        super().stop()

    def reserve(self, wanted: int) -> int:
        """Up to ``wanted`` delivery slots for leaders that the caller (intake) leases
        in the transaction that inserts them (``lease_new``), which saves their claim
        transaction. Every reservation ends in ``hand_over``, committed or not. None
        unless ``run`` is delivering."""
        if not self._running or self._stopping.is_set():
            return 0
        granted = max(0, min(wanted, self._concurrency - len(self._inflight) - self._reserved))
        self._reserved += granted
        return granted

    def can_deliver(self, new: Notification) -> bool:
        """Is every channel of this leader (one intake is about to insert) configured
        here, with room in its bulkhead? (Work for a channel this replica lacks is left
        to a replica that has it, never failed here; work for a full channel is left
        to a claim once it has room.)"""
        channels = new.notification.effective.channels
        return all(ch in self._channels for ch in channels) and self.bulkheads.has_room(channels)

    def lease_new(
        self, accepted: Notification, now: datetime
    ) -> tuple[Notification, Claim, list[NewEvent]]:
        """Lease a leader about to be inserted, as a claim would: its first attempt.
        Returns the leader leased (what to insert instead: its delivery job runs under
        the lease token and expiry; the settle counts the attempt), the claim and the
        events to commit with it (ATTEMPT_STARTED and one CHANNEL_ATTEMPT_STARTED per
        channel)."""
        start = lifecycle.decide_claim(
            attempts=accepted.attempts,
            cycle_attempts=accepted.cycle_attempts,
            max_attempts=accepted.max_attempts,
            recovered=False,
            delivery_mode=accepted.delivery_mode,
        )
        # A new row has every attempt left (validation keeps max_attempts >= 1).
        assert isinstance(start, lifecycle.StartAttempt), start
        token = str(uuid.uuid4())
        claim = Claim(
            accepted, token, start.attempt, start.cycle_attempt, remaining_channels(accepted)
        )
        leased = accepted.leased(token, now + self._lease)
        return leased, claim, claim_events(claim, recovered=False)

    def hand_over(self, reserved: int, claims: Sequence[Claim]) -> None:
        """Release ``reserved`` slots and deliver ``claims`` (leased by a committed
        transaction; none if it failed)."""
        self._reserved -= reserved
        self._wake.set()
        if not self._running:  # cancelled meanwhile: the leases expire and are recovered
            return
        for claim in claims:
            self._spawn(claim)

    def _spawn(self, claim: Claim) -> asyncio.Task[None]:
        # Bulkhead places taken now, synchronously, so the next claim (or hand-over)
        # already sees them; a channel refused here is answered busy, not called.
        entered = {ch for ch in claim.channels if self.bulkheads.enter(ch)}
        task = asyncio.create_task(self._deliver_logged(claim, entered))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        task.add_done_callback(lambda _t: self._wake.set())
        return task

    @phased(DISPATCH_LOOP)
    async def run(self) -> None:
        """Keep up to ``concurrency`` deliveries in flight until stopped (or cancelled):
        the shared loop (``workers.loop``) runs ``run_once``, woken by work signals and
        by every delivery that finishes."""
        inflight = self._inflight
        self._running = True
        try:
            await super().run()
            # Leases handed over by transactions still committing: deliver them too.
            while self._reserved:
                self._wake.clear()
                await wait_event(self._wake, self._idle_poll)
            await asyncio.gather(*inflight, return_exceptions=True)
        finally:
            self._running = False
            for task in inflight:
                task.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)
            await self.settlement.close()

    async def _next_due(self) -> datetime | None:
        """The next due time, read again only when it may have moved earlier: after a
        work signal (every commit that leaves unleased work pending sends one, here or,
        through NOTIFY, in another process), once the time read has passed, or once
        the read is an idle poll old. Claims and settlements without a signal only remove or lease
        work, so a time read before them is at worst early (one needless wake-up). A
        lone producer went idle after every delivery and paid a read transaction for
        the same answer each time."""
        known = self._due_known
        if (
            known is not None
            and known[0] == self._signals
            and time.monotonic() - known[2] < self._idle_poll
        ):
            due = known[1]
            if due is None or due > self._clock():
                return due
        signals, read_at = self._signals, time.monotonic()
        if self._carried_at is None or self._clock() - self._carried_at >= self._idle_poll_delta:
            await self._carry()
        async with self._store.read() as tx:
            due = await tx.dispatch.next_due_at(self._channels.names())
        self._due_known = (signals, due, read_at)
        return due

    async def _carry(self) -> None:
        """Give delivery jobs to the leaders a replica of the previous release queued
        (and cancel the jobs of rows it settled): while idle, at most once an idle poll."""
        self._carried_at = self._clock()
        async with self._store.write() as tx:
            if await tx.dispatch.carry(self._clock(), limit=self._batch * 8):
                tx.signal(TOPIC_WORK)

    @phased(ATTEMPT)  # the task of each spawned delivery
    async def _deliver_logged(self, claim: Claim, entered: set[str]) -> None:
        try:
            await self._sender.deliver(claim, entered)
        except Exception:
            # The lease expires and another attempt recovers the row.
            log.exception("delivery failed", extra={"notification_id": claim.notification.id})

    @phased(CLAIM)
    async def claim(self, limit: int, channels: Sequence[str] | None = None) -> list[Claim]:
        """Claim up to ``limit`` due leaders naming only ``channels`` (default: every
        channel configured here)."""
        now = self._clock()
        channels = self._channels.names() if channels is None else channels
        claims: list[Claim] = []
        async with self._store.write() as tx:
            self._signals_seen, self._last_claim = self._signals, time.monotonic()
            leases = await tx.dispatch.claim(
                now=now, limit=limit, lease=self._lease, channels=channels
            )
            new_events: list[NewEvent] = []
            exhausted: list[Settled] = []
            holds = []
            for leased in leases:
                n = leased.notification
                decision = lifecycle.decide_claim(
                    attempts=n.attempts,
                    cycle_attempts=n.cycle_attempts,
                    max_attempts=n.max_attempts,
                    recovered=leased.recovered,
                    delivery_mode=n.delivery_mode,
                )
                claim = Claim(
                    n,
                    leased.lease_token,
                    decision.attempt,
                    decision.cycle_attempt,
                    remaining_channels(n),
                )
                if isinstance(decision, lifecycle.SettleExhausted):
                    settled = await self.settlement.settle_exhausted(tx, claim, decision, now)
                    exhausted.append(settled)
                    continue
                if self._windows is not None:
                    held = await claim_hold(self._windows, tx, n, leased.lease_token, now)
                    if held is not None:
                        holds.append(held[0])
                        new_events.append(held[1])
                        continue
                claims.append(claim)
                new_events += claim_events(claim, recovered=decision.recovered)
            if holds:
                await tx.maintenance.hold(holds, now)
                tx.signal(TOPIC_WORK)  # slots taken without filling them: claim again
            await tx.events.append([*new_events, *(e for s in exhausted for e in s.events())], now)
        for s in exhausted:
            self.settlement.count(s, now)
        return claims

    async def deliver(self, claim: Claim) -> None:
        """Send one claim to its channels and settle the answers (its bulkhead places
        taken and given back as a spawned delivery's are)."""
        entered = {ch for ch in claim.channels if self.bulkheads.enter(ch)}
        await self._sender.deliver(claim, entered)
