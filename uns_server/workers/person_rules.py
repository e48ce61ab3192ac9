"""People's staged rules firing (SPEC §7 "Staged personal rules"): each later rule is
a ``person_rule`` row of the work table (``domain.person_rule_jobs``), inserted by the
delivery's settlement that first asks the person. A round:

1. **Claim** (one transaction): claim due jobs, lock their
   notifications and ask ``person_rule_jobs.decide``. Stale (the answer no longer
   owed): the job completes, nothing sent. Later (the delivery still PENDING, or the
   person's own quiet hours): the job completes and a successor is inserted, due
   then. Fire: the person's contacts on the rule's channel are read now, and one
   CHANNEL_ATTEMPT_STARTED per message commits with the claim, before any provider
   call (the job's lease is the message's).
2. **Send** outside any transaction, the message the delivery sends (its templates,
   the person's links), under its route ``<channel>@<person>:after:<seconds>``.
3. **Settle** (one transaction), the row locked, the job's fenced settle first: a
   transient failure with tries left retries at the backoff; otherwise the rule is
   decided (SENT, or FAILED with the error) and its ``outcome.staged`` entry says so.
   The references of what was sent join the row's, so the message is closed when the
   obligation ends (an answer that came meanwhile finds the job running,
   ``FollowUps.sending``, and closes it once settled). CHANNEL_ATTEMPT_RESULT per
   message, with ``recipient_id``, ``route`` and ``staged_rule``. A lost fence
   records LEASE_LOST with the results and changes nothing.

A call nobody answers (``twilio_voice``, not reached) is the provider's later
answer, not this job's: it stops nothing, so the person's next rule still fires.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from uns_server.channels.base import ChannelResult
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain import person_rule_jobs as rules
from uns_server.domain import schedule
from uns_server.domain.enums import EventKind
from uns_server.domain.jobs import JobState, NewJob, SettleJob
from uns_server.domain.moves import MoveLost, RecordPersonRule
from uns_server.domain.outcomes import provider_refs_json
from uns_server.domain.records import Job, Notification
from uns_server.domain.retry import next_attempt_at
from uns_server.domain.staged_rules import route_key
from uns_server.services.action_links import ActionLinkService
from uns_server.services.targeting import PersonRoute, routes_of
from uns_server.store.port import NewEvent, Store
from uns_server.workers.dispatch.references import sent_reference
from uns_server.workers.followup_progress import result_json
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.messages import outbound_message, send_built
from uns_server.workers.provider_call import guarded_call
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.person_rules")
Clock = Callable[[], datetime]

BATCH_DEFAULT = 64
KINDS = (rules.KIND,)


@dataclass(frozen=True)
class RuleClaim:
    """A due rule being fired under its job's lease: the person's routes on its
    channel (each keyed ``route_key``)."""

    notification: Notification
    job: Job
    rule: rules.PersonRule
    routes: tuple[tuple[str, PersonRoute], ...]

    @property
    def token(self) -> str:
        assert self.job.lease_token is not None, "a claimed job holds a lease"
        return self.job.lease_token


@dataclass(frozen=True)
class PersonRuleRound:
    fired: int  # rules sent and settled (or fenced)
    done: int  # jobs finished without a send (stale, rescheduled, nobody to reach)
    more: bool = False
    due_in: float | None = None


class PersonRuleWorker(LoopWorker):
    name = "person_rules"  # repeated faults turn health NOT_SERVING
    kinds = frozenset(KINDS)  # the rescuer wakes it when it makes one due

    def __init__(
        self,
        store: Store,
        channels: ChannelRegistry,
        clock: Clock,
        *,
        lease_seconds: float,
        poll_seconds: float,
        batch_size: int = BATCH_DEFAULT,
        rand: Callable[[], float] = random.random,
        links: ActionLinkService | None = None,
        supervision: Supervision | None = None,
    ) -> None:
        super().__init__(poll_seconds, supervision)
        self._store, self._channels, self._clock = store, channels, clock
        self._lease = timedelta(seconds=lease_seconds)
        self._batch, self._rand, self._links = batch_size, rand, links

    async def run_once(self) -> PersonRuleRound:
        claims, done = await self.claim()
        await asyncio.gather(*(self.fire(c) for c in claims))
        if len(claims) + done >= self._batch:
            return PersonRuleRound(len(claims), done, more=True)
        async with self._store.read() as tx:
            due = await tx.jobs.next_due_at(KINDS)
        return PersonRuleRound(len(claims), done, due_in=seconds_until(due, self._clock()))

    async def claim(self) -> tuple[list[RuleClaim], int]:
        now = self._clock()
        claims: list[RuleClaim] = []
        done: list[SettleJob] = []
        later: list[NewJob] = []
        async with self._store.write() as tx:
            jobs = await tx.jobs.claim(KINDS, now=now, limit=self._batch, lease=self._lease)
            rows = await tx.acks.locked({j.notification_id for j in jobs if j.notification_id})
            people = await tx.people.recipients_by_id(
                {str(j.args.get("recipient_id")) for j in jobs}
            )
            started: list[NewEvent] = []
            for job in jobs:
                rule, n = rules.PersonRule.of(job), rows.get(job.notification_id or "")
                decision = rules.decide(rule, n, now)
                if n is None or isinstance(decision, rules.Stale):
                    done.append(rules.settle_done(job))
                    continue
                if isinstance(decision, rules.Later):
                    done.append(rules.settle_done(job))
                    later.append(rule.job(n.id, decision.at))
                    continue
                person = people.get(rule.recipient_id)
                intent = n.notification.intent.value if n.notification.intent else None
                quiet = {rule.recipient_id: person.quiet_hours} if person else {}
                held = schedule.held_until(quiet, now, intent)
                if held:  # the person's own quiet hours: fired when they end
                    done.append(rules.settle_done(job))
                    later.append(rule.job(n.id, held[rule.recipient_id]))
                    continue
                asked = routes_of((rule.recipient_id,), people, self._channels.names())
                keyed = tuple(
                    (route_key(r.key, rule.after), r)
                    for r in asked.routes
                    if r.channel == rule.channel
                )
                claim = RuleClaim(n, job, rule, keyed)
                claims.append(claim)
                started += [_event(claim, EventKind.CHANNEL_ATTEMPT_STARTED, k) for k, _ in keyed]
            landed = await tx.jobs.settle_many(done, now)
            if len(landed) != len(done):
                raise MoveLost(f"person rules: {len(landed)} of {len(done)} jobs settled")
            await tx.jobs.insert_many(later, now)
            await tx.events.append(started, now)
        return claims, len(done)

    async def fire(self, claim: RuleClaim) -> None:
        try:
            sent = await asyncio.gather(*(self._send(claim, k, r) for k, r in claim.routes))
            await self.settle(claim, sent)
        except Exception:  # the lease expires and the rescuer makes the job due again
            log.exception("staged rule failed", extra={"notification_id": claim.notification.id})

    async def _send(
        self, claim: RuleClaim, key: str, route: PersonRoute
    ) -> tuple[str, ChannelResult]:
        n = claim.notification
        if route.channel not in self._channels:
            return key, ChannelResult.permanent(f"channel {route.channel!r} is not configured")
        links = None
        if self._links is not None and n.require_ack and n.deadline is not None:
            links = self._links.until(n.id, n.deadline)
        message = outbound_message(
            n,
            attempt=claim.job.attempt,
            # Stable across tries of this rule, so providers can drop duplicates.
            idempotency_token=f"{n.id}:{key}:{n.cycle}",
            links=links,
            recipient_id=route.recipient_id,
            to=route.address,
            channel_type=self._channels.type_of(route.channel),
            person=route.person,
        )
        adapter = self._channels.get(route.channel)
        result = await guarded_call(
            lambda: send_built(adapter, message),
            lease=self._lease,
            log_extra={"channel": route.channel, "notification_id": n.id},
        )
        return key, result

    async def settle(self, claim: RuleClaim, sent: Sequence[tuple[str, ChannelResult]]) -> bool:
        """Record this try of the rule; False when its lease was lost."""
        now = self._clock()
        n, rule, job = claim.notification, claim.rule, claim.job
        failed = [r for _, r in sent if not r.success]
        error = "; ".join(r.error or "failed" for r in failed)
        if not claim.routes:
            error = f"no contact on channel {rule.channel!r} any more"
        retry = bool(failed) and all(r.retryable for r in failed)
        if retry and job.attempt < job.max_attempts:
            at = next_attempt_at(now, job.attempt, rand=self._rand)
            settle = rules.settle_retry(job.id, claim.token, at, error)
        elif error:
            settle = rules.settle_failed(job.id, claim.token, error)
        else:
            settle = SettleJob(job.id, claim.token, JobState.COMPLETED)
        results = [_event(claim, EventKind.CHANNEL_ATTEMPT_RESULT, k, r, now) for k, r in sent]
        async with self._store.write() as tx:
            if not await tx.jobs.settle_many([settle], now):  # rescued meanwhile
                lost = _lost(claim, [result_json(r) for _, r in sent])
                await tx.events.append([*results, lost], now)
                return False
            current = (await tx.acks.locked([n.id])).get(n.id)
            if current is not None:
                await tx.follow_ups.record_person_rule(
                    _record(current, claim, sent, settle, error, now)
                )
            await tx.events.append(results, now)
        return True


def _record(
    current: Notification,
    claim: RuleClaim,
    sent: Sequence[tuple[str, ChannelResult]],
    settle: SettleJob,
    error: str,
    now: datetime,
) -> RecordPersonRule:
    """The row's outcome with the rule's entry marked once decided, and the references
    of the messages accepted (closed when the obligation ends)."""
    routes = dict(claim.routes)
    new: dict[str, Any] = {}
    for key, result in sent:
        route = routes[key]
        ref = sent_reference(
            route.channel,
            result,
            attempt=claim.job.attempt,
            cycle=current.cycle,
            at=now,
            recipient_id=route.recipient_id,
        )
        if ref is not None:
            new[key] = ref | {"staged_after_seconds": int(claim.rule.after.total_seconds())}
    refs = {**provider_refs_json(current.provider_refs), **new} if new else None
    staged: list[dict[str, Any]] = [dict(e) for e in current.outcome.staged]
    if settle.state is JobState.COMPLETED:
        staged = rules.marked(staged, claim.rule, rules.SENT, now)
    elif settle.state is JobState.DISCARDED:
        staged = rules.marked(staged, claim.rule, rules.FAILED, now, error)
    outcome = {**current.outcome.to_json(), "staged": staged}
    return RecordPersonRule(current.id, outcome, refs, now)


def _payload(claim: RuleClaim, key: str) -> dict[str, Any]:
    route = dict(claim.routes)[key]
    return {
        "attempt": claim.job.attempt,
        "cycle": claim.rule.cycle,
        "lease_token": claim.token,
        "channel": route.channel,
        "route": key,
        "recipient_id": route.recipient_id,
        "staged_rule": {
            "after_seconds": int(claim.rule.after.total_seconds()),
            "due_time": claim.rule.due.isoformat(),
        },
    }


def _event(
    claim: RuleClaim,
    kind: EventKind,
    key: str,
    result: ChannelResult | None = None,
    now: datetime | None = None,
) -> NewEvent:
    payload = _payload(claim, key)
    if result is None:
        payload["provider_effect_may_have_occurred"] = True
    else:
        payload |= {
            "success": result.success,
            "retryable": result.retryable,
            "message_id": result.message_id,
            "error": result.error,
            "metadata": dict(result.metadata),
            "provider_observed_at": (now or claim.job.created_at).isoformat(),
        }
        route = dict(claim.routes)[key]
        ref = sent_reference(
            route.channel,
            result,
            attempt=claim.job.attempt,
            cycle=claim.rule.cycle,
            at=now or claim.job.created_at,
            recipient_id=route.recipient_id,
        )
        if ref is not None:
            payload["provider_reference"] = ref
    n = claim.notification
    return NewEvent(n.id, n.principal, n.notification_type, kind, payload)


def _lost(claim: RuleClaim, results: list[dict[str, Any]]) -> NewEvent:
    n = claim.notification
    payload = {
        "lease_token": claim.token,
        "attempt": claim.job.attempt,
        "recipient_id": claim.rule.recipient_id,
        "channel": claim.rule.channel,
        "results": results,
        "provider_effect_may_have_occurred": True,
    }
    return NewEvent(n.id, n.principal, n.notification_type, EventKind.LEASE_LOST, payload)
