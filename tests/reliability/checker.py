"""An independent record of what producers were told, and a checker that holds the
server to it through the public API only (Jepsen's queue checker, adapted).

The *record* (:class:`History`) is kept by the load generator: for every
SendNotification, the idempotency key and whether the call answered OK (with the
notification id), failed definitely (a refusal), or ended with an unknown outcome
(UNAVAILABLE, DEADLINE_EXCEEDED, ...: it may or may not have committed).

The *observations* are what the service says afterwards, read as an operator:
notifications (ListNotifications / GetNotification), the full event timeline
(WatchEvents with replay_history) and every request the loopback providers saw
(:class:`Receipt`, keyed by the webhook's ``webhook-id`` =
``<notification_id>:<channel>:<cycle>``).

Producers retry a send whose outcome they did not learn with the same idempotency
key (as a careful client must), so one *send* (one key) may take several calls.

:func:`check` classifies, per send and per notification:

* **lost** — acknowledged, but missing, or not DELIVERED / DEDUPLICATED / FAILED
  with a recorded error / PENDING with a future attempt (or a live lease);
* **recovered** — a call for the key ended with an unknown outcome, yet the send
  was delivered: acknowledged by a retry with the same key (one notification, the
  same id), or found committed although no call ever answered OK;
* **unexpected** — a provider (or the store) saw a notification nobody sent, or the
  store holds two notifications for one idempotency key;
* **unattributed** — a provider request the checker cannot tie to a committed
  CHANNEL_ATTEMPT_STARTED of the same notification, channel, cycle and attempt (the
  webhook body carries the attempt number): claim before I/O, checked per request;
* **duplicated** — a provider *accepted* (answered 2xx to) the same webhook-id more
  than once. Each repeat is explained only by the attempt whose acceptance it
  repeats (the earlier accepted attempt): that attempt was fenced (LEASE_LOST,
  ``provider_effect_may_have_occurred``), left unsettled so the next attempt was
  claimed with ``recovery_may_repeat_provider_effect``, or ended in a failed
  CHANNEL_ATTEMPT_RESULT whose metadata says ``provider_effect_possible`` (the
  provider may have acted before the client gave up). Flags elsewhere in the
  notification's history explain nothing, and neither does CHANNEL_ATTEMPT_STARTED's
  ``provider_effect_may_have_occurred`` (true on *every* attempt by design). Two
  acceptances from one attempt are never explained.

and checks that each timeline is a legal walk of the state machines (seed 000 §1,
event catalog §3) that ends in the state the API reports, and that a DELIVERED
notification was really accepted by its provider.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

# Final states, as the wire enum names without their prefix.
PENDING, DELIVERED, FAILED, DEDUPLICATED = "PENDING", "DELIVERED", "FAILED", "DEDUPLICATED"
WITHDRAWN = "WITHDRAWN"
FOLLOW_UP_KINDS = frozenset({"REMINDER_SENT", "ESCALATED"})
ACK_KINDS = frozenset({"ACKED", "DISMISSED", "TIMED_OUT"})

INTERRUPTED = "DELIVERY_RESULT (interrupted)"

# gRPC codes after which a SendNotification may or may not have committed.
UNKNOWN_OUTCOME_CODES = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN", "INTERNAL"}
)


# --------------------------------------------------------------------------- record


@dataclass
class SendRecord:
    key: str
    notification_id: str | None = None  # set once any call for the key answered OK
    codes: list[str] = field(default_factory=list)  # every call's outcome, in order

    @property
    def acknowledged(self) -> bool:
        return self.notification_id is not None

    @property
    def unknown(self) -> bool:
        """Never answered OK, and some call may have committed."""
        return not self.acknowledged and any(c in UNKNOWN_OUTCOME_CODES for c in self.codes)

    @property
    def ok_after_unknown(self) -> bool:
        """Answered OK by a retry after a call whose outcome was unknown."""
        if not self.acknowledged:
            return False
        first_ok = self.codes.index("OK")
        return any(c in UNKNOWN_OUTCOME_CODES for c in self.codes[:first_ok])


class History:
    """What the producers were told; the checker's independent source of truth."""

    def __init__(self) -> None:
        self.sends: dict[str, SendRecord] = {}
        self.codes: Counter[str] = Counter()

    def _record(self, key: str) -> SendRecord:
        return self.sends.setdefault(key, SendRecord(key))

    def ok(self, key: str, notification_id: str) -> None:
        rec = self._record(key)
        assert rec.notification_id in (None, notification_id), (
            f"idempotency key {key!r} answered two ids: {rec.notification_id}, {notification_id}"
        )
        rec.notification_id = notification_id
        rec.codes.append("OK")
        self.codes["OK"] += 1

    def error(self, key: str, code: str) -> None:
        self._record(key).codes.append(code)
        self.codes[code] += 1

    @property
    def acknowledged(self) -> dict[str, str]:
        """notification id -> idempotency key, for every OK answer."""
        return {r.notification_id: k for k, r in self.sends.items() if r.notification_id}

    @property
    def unknown_keys(self) -> set[str]:
        return {k for k, r in self.sends.items() if r.unknown}

    @property
    def ok_after_unknown_keys(self) -> set[str]:
        return {k for k, r in self.sends.items() if r.ok_after_unknown}

    @property
    def calls(self) -> int:
        return sum(self.codes.values())


# ----------------------------------------------------------------------- observations


@dataclass(frozen=True)
class NotificationView:
    """The parts of ``uns.v1.Notification`` the checker looks at."""

    id: str
    idempotency_key: str
    state: str  # PENDING / DELIVERED / FAILED / DEDUPLICATED
    delivery_mode: str = "GUARANTEED"
    dead_letter: bool = False
    error_message: str = ""
    attempts: int = 0
    cycle: int = 1
    channels: tuple[str, ...] = ()
    dedup_owner_id: str = ""
    next_attempt_time: dt.datetime | None = None
    lease_expire_time: dt.datetime | None = None

    @classmethod
    def from_proto(cls, n: Any) -> NotificationView:
        from uns.v1 import types_pb2 as t

        def when(name: str) -> dt.datetime | None:
            if not n.HasField(name):
                return None
            value: dt.datetime = getattr(n, name).ToDatetime(tzinfo=dt.UTC)
            return value

        return cls(
            id=n.id,
            idempotency_key=n.idempotency_key,
            state=t.NotificationState.Name(n.state).removeprefix("NOTIFICATION_STATE_"),
            delivery_mode=t.DeliveryMode.Name(n.effective_policy.delivery_mode).removeprefix(
                "DELIVERY_MODE_"
            ),
            dead_letter=n.dead_letter,
            error_message=n.outcome.error_message,
            attempts=n.attempts,
            cycle=n.cycle,
            channels=tuple(n.effective_policy.channels),
            dedup_owner_id=n.dedup_owner_id,
            next_attempt_time=when("next_attempt_time"),
            lease_expire_time=when("lease_expire_time"),
        )


@dataclass(frozen=True)
class EventView:
    id: str
    sequence: int
    notification_id: str
    kind: str  # catalog name without the EVENT_KIND_ prefix
    payload: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_proto(cls, e: Any) -> EventView:
        from uns.v1 import types_pb2 as t

        return cls(
            id=e.id,
            sequence=e.sequence,
            notification_id=e.notification_id,
            kind=t.EventKind.Name(e.kind).removeprefix("EVENT_KIND_"),
            payload=_ints(json_format.MessageToDict(e.payload)),
        )


def _ints(value: Any) -> Any:
    """Struct numbers arrive as floats; attempt counters compare as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@dataclass(frozen=True)
class Receipt:
    """One request a loopback provider saw, and whether it answered 2xx."""

    webhook_id: str
    accepted: bool
    path: str = ""
    attempt: int | None = None  # the body's ``data.attempt`` (None: not readable)

    def parts(self) -> tuple[str, str, int] | None:
        nid, sep1, rest = self.webhook_id.partition(":")
        channel, sep2, cycle = rest.rpartition(":")
        if not (sep1 and sep2 and nid and channel and cycle.isdigit()):
            return None
        return nid, channel, int(cycle)


# ---------------------------------------------------------------------------- timeline


def timeline_problems(
    events: Sequence[EventView], final: NotificationView | None = None
) -> list[str]:
    """Why this one notification's timeline is not a legal walk (empty list: it is).

    ``events`` are that notification's events in stream order; ``final`` is what the
    API reports now (the walk must end there).
    """
    problems: list[str] = []
    state: str | None = None
    leader = True
    cycle = 1
    last_attempt = 0
    # attempt -> what happened to it
    started_channels: dict[int, dict[str, str]] = defaultdict(dict)  # channel -> lease token
    results: dict[int, set[str]] = defaultdict(set)
    # attempt -> "DELIVERY_RESULT" / "LEASE_LOST" / INTERRUPTED (settled as exhausted
    # by the worker that recovered its lease: its own worker, if alive after all, may
    # still record results and LEASE_LOST)
    settled: dict[int, str] = {}
    attempt_cycle: dict[int, int] = {}
    successes: dict[int, set[str]] = defaultdict(set)  # cycle -> channels accepted
    effective_channels: tuple[str, ...] = ()
    delivered = 0
    ack_settled = False
    previous_sequence = 0

    def bad(e: EventView, why: str) -> None:
        problems.append(f"#{e.sequence} {e.kind}: {why}")

    for e in events:
        p = e.payload
        if e.sequence <= previous_sequence:
            bad(e, f"sequence not increasing (after #{previous_sequence})")
        previous_sequence = e.sequence
        if state is None:
            if e.kind != "ACCEPTED":
                bad(e, "first event is not ACCEPTED")
            state = PENDING
            effective_channels = tuple((p.get("effective") or {}).get("channels") or ())
            if e.kind == "ACCEPTED":
                continue
        k = e.kind
        attempt = p.get("attempt")
        if k == "ACCEPTED":
            bad(e, "second ACCEPTED")
        elif k == "DEDUP_LINKED":
            if last_attempt:
                bad(e, "linked after dispatch began")
            leader = False
            if p.get("owner_status") == DELIVERED:
                state = DEDUPLICATED
        elif k == "ATTEMPT_STARTED":
            if state != PENDING or not leader:
                bad(e, f"attempt started in state {state}{'' if leader else ' (follower)'}")
            if attempt != last_attempt + 1:
                bad(e, f"attempt {attempt} does not follow attempt {last_attempt}")
            if p.get("cycle") != cycle:
                bad(e, f"cycle {p.get('cycle')} but the notification is in cycle {cycle}")
            unsettled = last_attempt > 0 and settled.get(last_attempt) not in (
                "DELIVERY_RESULT",
                INTERRUPTED,
            )
            if bool(p.get("recovery_may_repeat_provider_effect")) != unsettled:
                bad(
                    e,
                    "recovery_may_repeat_provider_effect="
                    f"{p.get('recovery_may_repeat_provider_effect')} but the previous attempt "
                    f"was {'not ' if unsettled else ''}settled",
                )
            last_attempt = attempt if isinstance(attempt, int) else last_attempt + 1
            attempt_cycle[last_attempt] = cycle
        elif k == "CHANNEL_ATTEMPT_STARTED":
            if attempt != last_attempt or not last_attempt:
                bad(e, f"for attempt {attempt}, but the current attempt is {last_attempt}")
            channel = p.get("channel")
            if channel in started_channels[attempt]:
                bad(e, f"channel {channel} started twice in attempt {attempt}")
            started_channels[attempt][channel] = p.get("lease_token")
            if p.get("provider_effect_may_have_occurred") is not True:
                bad(e, "provider_effect_may_have_occurred is not true")
        elif k == "CHANNEL_ATTEMPT_RESULT":
            channel = p.get("channel")
            if channel not in started_channels.get(attempt, {}):
                bad(e, f"result for {channel} in attempt {attempt} that never started it")
            elif started_channels[attempt][channel] != p.get("lease_token"):
                bad(e, "lease token differs from the one that started the channel")
            if channel in results[attempt]:
                bad(e, f"second result for {channel} in attempt {attempt}")
            if attempt in settled and settled[attempt] != INTERRUPTED:
                bad(e, f"result after attempt {attempt} was settled ({settled[attempt]})")
            results[attempt].add(channel)
            if p.get("success") is True:
                successes[attempt_cycle.get(attempt, cycle)].add(channel)
        elif k == "LEASE_LOST" and p.get("follow_up"):
            # A reminder or escalation step fenced (its lease expired, or a withdrawal).
            if state != DELIVERED:
                bad(e, f"follow-up lease lost in state {state}")
            if p.get("provider_effect_may_have_occurred") is not True:
                bad(e, "provider_effect_may_have_occurred is not true")
        elif k == "LEASE_LOST":
            if attempt not in attempt_cycle:
                bad(e, f"lease lost for attempt {attempt} that never started")
            elif attempt in settled and settled[attempt] != INTERRUPTED:
                bad(e, f"attempt {attempt} already settled ({settled[attempt]})")
            elif started_channels[attempt] and p.get("lease_token") not in set(
                started_channels[attempt].values()
            ):
                bad(e, "lease token is not the attempt's")
            if p.get("provider_effect_may_have_occurred") is not True:
                bad(e, "provider_effect_may_have_occurred is not true")
            settled.setdefault(attempt, "LEASE_LOST")
        elif k == "DELIVERY_RESULT":
            status = p.get("status")
            if attempt != last_attempt:
                bad(e, f"settles attempt {attempt} while attempt {last_attempt} holds the lease")
            # An interrupted attempt is settled by the worker that recovered its lease,
            # after its own worker may have recorded LEASE_LOST (it outlived the lease).
            interrupted = p.get("interrupted") is True
            if attempt in settled and not (interrupted and settled[attempt] == "LEASE_LOST"):
                bad(e, f"attempt {attempt} already settled ({settled[attempt]})")
            settled[attempt] = INTERRUPTED if interrupted else "DELIVERY_RESULT"
            missing = set(started_channels.get(attempt, {})) - results[attempt]
            if interrupted and (status != FAILED or not started_channels.get(attempt)):
                bad(e, "an interrupted attempt can only end in FAILED")
            if missing and not interrupted:
                bad(e, f"settled without results for {sorted(missing)}")
            if state != PENDING or not leader:
                bad(e, f"settlement in state {state}")
            if status == DELIVERED:
                delivered += 1
                if delivered > 1:
                    bad(e, "second successful settlement (DELIVERED twice)")
                unaccepted = set(effective_channels) - successes[cycle]
                if unaccepted:
                    bad(e, f"DELIVERED but {sorted(unaccepted)} never accepted it")
                state = DELIVERED
            elif status == FAILED:
                if p.get("dead_letter") is not None and not isinstance(p.get("dead_letter"), bool):
                    bad(e, "dead_letter is not a boolean")
                state = FAILED
            elif status == PENDING:
                state = PENDING
            else:
                bad(e, f"unknown status {status!r}")
        elif k == "DEDUP_SATISFIED":
            if state != PENDING or leader:
                bad(e, f"satisfied in state {state}{' (leader)' if leader else ''}")
            state = DEDUPLICATED
        elif k == "DEDUP_OWNER_PROMOTED":
            if state != PENDING or leader:
                bad(e, f"promoted in state {state}")
            leader = True
        elif k == "DEDUP_RELINKED":
            if state != PENDING or leader:
                bad(e, f"relinked in state {state}")
        elif k == "OBLIGATION_HANDED_OFF":
            if state != FAILED:
                bad(e, f"handed off in state {state}")
        elif k in ACK_KINDS:
            if state != DELIVERED:
                bad(e, f"ack event in state {state} (acks only follow DELIVERED)")
            if ack_settled:
                bad(e, "second terminal ack event")
            ack_settled = True
        elif k == "REPLAY_REQUESTED":
            if state != FAILED:
                bad(e, f"replay in state {state}")
            state = PENDING
            cycle = int(p.get("cycle") or cycle + 1)
        elif k == "FAILURE_RESOLVED":
            if state != FAILED:
                bad(e, f"failure resolved in state {state}")
        elif k == "WITHDRAWN":
            if p.get("scope") == "ACK":
                if state != DELIVERED or ack_settled:
                    bad(e, f"ack withdrawn in state {state}{' (settled)' if ack_settled else ''}")
                ack_settled = True
            else:
                if state not in (PENDING, FAILED):
                    bad(e, f"withdrawn in state {state}")
                state = WITHDRAWN
        elif k in FOLLOW_UP_KINDS:
            # Claimed while the ack was PENDING; it may settle while the step is sent
            # or waits for a retry (then the step is recorded STOPPED).
            if state != DELIVERED:
                bad(e, f"{k} in state {state}")
        elif k != "RETENTION_APPLIED":
            bad(e, "unknown event kind")

    if state is None:
        problems.append("no events at all (no ACCEPTED)")
    elif final is not None:
        if final.state != state:
            problems.append(f"timeline ends in {state} but the API reports {final.state}")
        if final.attempts != last_attempt:
            problems.append(
                f"timeline has {last_attempt} attempts but the API reports {final.attempts}"
            )
    return problems


# Why an attempt's provider effect may have happened without the server knowing it
# succeeded (the only reasons a later attempt may repeat it), strongest first.
FENCED, ABANDONED, EFFECT_POSSIBLE = "lease_lost", "abandoned", "effect_possible"


def attempt_flags(events: Iterable[EventView]) -> dict[tuple[int, str], str]:
    """(attempt, channel) -> why that attempt's effect on the channel may have gone
    unrecorded; ``channel`` is ``"*"`` when the flag covers every channel of the attempt.
    ``events`` are one notification's timeline."""
    flags: dict[tuple[int, str], str] = {}
    for e in events:
        p = e.payload
        attempt = p.get("attempt")
        if not isinstance(attempt, int):
            continue
        if e.kind == "LEASE_LOST" and p.get("provider_effect_may_have_occurred") is True:
            flags[(attempt, "*")] = FENCED
        elif e.kind == "ATTEMPT_STARTED" and p.get("recovery_may_repeat_provider_effect") is True:
            flags.setdefault((attempt - 1, "*"), ABANDONED)
        elif (
            e.kind == "CHANNEL_ATTEMPT_RESULT"
            and p.get("success") is False
            and (p.get("metadata") or {}).get("provider_effect_possible") is True
        ):
            flags.setdefault((attempt, str(p.get("channel"))), EFFECT_POSSIBLE)
    return flags


def repeat_explanation(
    flags: Mapping[tuple[int, str], str], channel: str, earlier: int, later: int
) -> str | None:
    """Why attempt ``later`` may repeat the provider effect of attempt ``earlier`` on
    ``channel`` (None: nothing explains it). Only the earlier attempt's own flag counts."""
    if later <= earlier:
        return None  # one attempt accepted twice: no server decision explains that
    return flags.get((earlier, "*")) or flags.get((earlier, channel))


# ----------------------------------------------------------------------------- check


@dataclass
class Report:
    sends: int = 0  # distinct idempotency keys the producers used
    calls: int = 0  # SendNotification calls, retries included
    acknowledged: int = 0
    unknown: int = 0  # never answered OK, may have committed
    committed_unknown: int = 0  # ... and did commit
    ok_after_unknown: int = 0  # answered OK by a retry after an unknown outcome
    recovered: list[str] = field(default_factory=list)
    lost: dict[str, str] = field(default_factory=dict)  # id -> why
    unexpected: list[str] = field(default_factory=list)
    unattributed: list[str] = field(default_factory=list)  # provider requests, see module doc
    duplicated: list[str] = field(default_factory=list)  # webhook ids accepted twice or more
    repeats: int = 0  # acceptances beyond the first, over all duplicated webhook ids
    explained: Counter[str] = field(default_factory=Counter)  # repeats, by explanation
    duplicated_unexplained: list[str] = field(default_factory=list)
    resent: int = 0  # provider requests beyond the first per webhook-id (retries included)
    # Provider requests with no CHANNEL_ATTEMPT_RESULT recorded for their attempt:
    # expected only when the sending process died; otherwise an observation was dropped.
    unrecorded_observations: list[str] = field(default_factory=list)
    false_delivered: list[str] = field(default_factory=list)
    illegal: dict[str, list[str]] = field(default_factory=dict)
    stream: list[str] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    lease_lost: int = 0
    recovered_attempts: int = 0
    events: int = 0

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.unattributed
            or self.duplicated_unexplained
            or self.false_delivered
            or self.illegal
            or self.stream
        )

    def counts(self) -> dict[str, int]:
        return {
            "sends": self.sends,
            "calls": self.calls,
            "acknowledged": self.acknowledged,
            "unknown": self.unknown,
            "committed_unknown": self.committed_unknown,
            "ok_after_unknown": self.ok_after_unknown,
            "lost": len(self.lost),
            "recovered": len(self.recovered),
            "unexpected": len(self.unexpected),
            "unattributed": len(self.unattributed),
            "duplicated": len(self.duplicated),
            "repeats": self.repeats,
            **{f"explained_{k}": v for k, v in sorted(self.explained.items())},
            "duplicated_unexplained": len(self.duplicated_unexplained),
            "resent": self.resent,
            "unrecorded_observations": len(self.unrecorded_observations),
            "false_delivered": len(self.false_delivered),
            "illegal_timelines": len(self.illegal),
            "lease_lost": self.lease_lost,
            "recovered_attempts": self.recovered_attempts,
            "events": self.events,
            **{f"state_{k.lower()}": v for k, v in sorted(self.states.items())},
        }

    def summary(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.counts().items())

    def details(self, limit: int = 10) -> str:
        lines = []
        for title, items in (
            ("lost", [f"{k}: {v}" for k, v in self.lost.items()]),
            ("unexpected", self.unexpected),
            ("unattributed", self.unattributed),
            ("duplicated_unexplained", self.duplicated_unexplained),
            ("false_delivered", self.false_delivered),
            ("illegal", [f"{k}: {v}" for k, v in self.illegal.items()]),
            ("stream", self.stream),
        ):
            if items:
                lines.append(f"{title} ({len(items)}):")
                lines.extend(f"  {x}" for x in items[:limit])
        return "\n".join(lines)

    def assert_ok(self) -> None:
        assert self.ok, f"checker: {self.summary()}\n{self.details()}"


def check(
    history: History,
    notifications: Iterable[NotificationView],
    events: Sequence[EventView],
    receipts: Iterable[Receipt] = (),
    *,
    now: dt.datetime,
    provider_channels: Iterable[str] = (),
) -> Report:
    """Hold the observations to the record. ``provider_channels``: channels whose every
    request the ``receipts`` cover (DELIVERED on them must show an accepted receipt)."""
    report = Report()
    views = {n.id: n for n in notifications}
    by_key: dict[str, NotificationView] = {}
    for n in sorted(views.values(), key=lambda n: n.id):
        if not n.idempotency_key:
            continue
        if n.idempotency_key in by_key and n.idempotency_key in history.sends:
            report.unexpected.append(
                f"{n.id}: a second notification for idempotency key {n.idempotency_key!r} "
                f"(first {by_key[n.idempotency_key].id})"
            )
            continue
        by_key.setdefault(n.idempotency_key, n)
    acked = history.acknowledged
    unknown = history.unknown_keys
    report.sends = len(history.sends)
    report.calls = history.calls
    report.acknowledged = len(acked)
    report.unknown = len(unknown)
    committed_unknown = {by_key[k].id for k in unknown if k in by_key}
    report.committed_unknown = len(committed_unknown)
    retried = {history.sends[k].notification_id for k in history.ok_after_unknown_keys}
    report.ok_after_unknown = len(retried)
    known_ids = set(acked) | committed_unknown
    for nid, key in acked.items():
        stored = by_key.get(key)
        if stored is not None and stored.id != nid:
            report.unexpected.append(f"{stored.id}: stored for key {key!r}, acknowledged {nid}")

    # The stream itself: strictly increasing sequences, each event once.
    seen_ids: set[str] = set()
    previous = 0
    for e in events:
        if e.sequence <= previous:
            report.stream.append(f"#{e.sequence} after #{previous}")
        if e.id in seen_ids:
            report.stream.append(f"event {e.id} (#{e.sequence}) delivered twice")
        seen_ids.add(e.id)
        previous = max(previous, e.sequence)
    report.events = len(events)

    timelines: dict[str, list[EventView]] = defaultdict(list)
    for e in events:
        timelines[e.notification_id].append(e)
        if e.kind == "LEASE_LOST":
            report.lease_lost += 1
        if e.kind == "ATTEMPT_STARTED" and e.payload.get("recovery_may_repeat_provider_effect"):
            report.recovered_attempts += 1

    # Store-level unexpected: rows (or timelines) nobody asked for.
    for nid in sorted((set(views) | set(timelines)) - known_ids):
        view = views.get(nid)
        if view is None or view.idempotency_key not in history.sends:
            report.unexpected.append(f"{nid}: in the store, never sent")

    # Every acknowledged (and every committed unknown-outcome) obligation.
    for nid in sorted(known_ids):
        view = views.get(nid)
        if view is None:
            if nid in acked:
                report.lost[nid] = "acknowledged, but the API does not know it"
            continue
        report.states[view.state] += 1
        why = _not_accounted_for(view, views, now)
        if why and nid in acked:
            report.lost[nid] = why
        problems = timeline_problems(timelines.get(nid, []), view)
        if problems:
            report.illegal[nid] = problems
        if (nid in committed_unknown or nid in retried) and view.state in (
            DELIVERED,
            DEDUPLICATED,
        ):
            report.recovered.append(nid)

    # What the providers saw: every request belongs to a committed attempt.
    started: dict[tuple[str, str, int], int] = {}  # (id, channel, attempt) -> cycle
    observed: set[tuple[str, str, int]] = set()
    for e in events:
        attempt = e.payload.get("attempt")
        if not isinstance(attempt, int):
            continue
        key = (e.notification_id, str(e.payload.get("channel")), attempt)
        if e.kind == "CHANNEL_ATTEMPT_STARTED":
            started[key] = _cycle_of(e)
        elif e.kind == "CHANNEL_ATTEMPT_RESULT":
            observed.add(key)
    received: Counter[str] = Counter()
    accepted_in: dict[str, list[int]] = defaultdict(list)  # webhook-id -> attempts
    for r in receipts:
        parts = r.parts()
        if parts is None or parts[0] not in known_ids:
            report.unexpected.append(f"provider saw {r.webhook_id!r}, never accepted")
            continue
        nid, channel, cycle = parts
        if r.attempt is None or started.get((nid, channel, r.attempt)) != cycle:
            report.unattributed.append(
                f"{r.webhook_id} attempt {r.attempt}: no CHANNEL_ATTEMPT_STARTED committed "
                "for that notification, channel, cycle and attempt"
            )
            continue
        received[r.webhook_id] += 1
        if (nid, channel, r.attempt) not in observed:
            report.unrecorded_observations.append(f"{r.webhook_id} attempt {r.attempt}")
        if r.accepted:
            accepted_in[r.webhook_id].append(r.attempt)
    report.resent = sum(count - 1 for count in received.values())
    flags_of: dict[str, dict[tuple[int, str], str]] = {}
    for webhook_id, attempts in sorted(accepted_in.items()):
        if len(attempts) < 2:
            continue
        report.duplicated.append(webhook_id)
        nid, channel, _cycle = Receipt(webhook_id, True).parts() or ("", "", 0)
        if nid not in flags_of:
            flags_of[nid] = attempt_flags(timelines.get(nid, []))
        ordered = sorted(attempts)
        for earlier, later in itertools.pairwise(ordered):
            report.repeats += 1
            why = repeat_explanation(flags_of[nid], channel, earlier, later)
            if why is None:
                report.duplicated_unexplained.append(
                    f"{webhook_id}: attempt {later} repeated attempt {earlier}'s acceptance, "
                    f"and attempt {earlier} is not flagged"
                )
            else:
                report.explained[why] += 1
    watched = set(provider_channels)
    accepted = {w for w, attempts in accepted_in.items() if attempts}
    for nid in sorted(known_ids):
        view = views.get(nid)
        if view is None or view.state != DELIVERED:
            continue
        for channel in watched & set(view.channels):
            if f"{nid}:{channel}:{view.cycle}" not in accepted:
                report.false_delivered.append(f"{nid}: DELIVERED, {channel} never accepted it")
    return report


def _cycle_of(e: EventView) -> int:
    return int(e.payload.get("cycle") or 1)


def _not_accounted_for(
    view: NotificationView, views: Mapping[str, NotificationView], now: dt.datetime
) -> str | None:
    """Why this obligation is neither satisfied nor legitimately parked (None: it is)."""
    if view.state in (DELIVERED, DEDUPLICATED):
        return None
    if view.state == FAILED:
        if not view.error_message:
            return "FAILED without a recorded error"
        if view.delivery_mode == "GUARANTEED" and not view.dead_letter:
            return "GUARANTEED FAILED but not dead-lettered"
        return None
    if view.state == PENDING:
        if view.lease_expire_time is not None and view.lease_expire_time > now:
            return None  # in flight under a live lease
        if view.next_attempt_time is not None and view.next_attempt_time > now:
            return None  # backing off
        owner = views.get(view.dedup_owner_id) if view.dedup_owner_id else None
        if owner is not None and owner.state == PENDING:
            return None  # follower behind a pending leader
        return "PENDING with no future attempt and no live lease"
    return f"unknown state {view.state}"


# ------------------------------------------------------------------------------ fencing


@dataclass
class Fencing:
    """What :func:`fencing` found over a whole event stream."""

    claims: int = 0  # leases taken (ATTEMPT_STARTED), each with a fresh token
    refused: int = 0  # settlements under a superseded token, refused (LEASE_LOST)
    problems: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"claims": self.claims, "refused": self.refused, "backwards": len(self.problems)}


def fencing(events: Sequence[EventView]) -> Fencing:
    """Fencing tokens only move forward, per notification: each claim takes the next
    attempt number under a token no earlier attempt had; every record made under a
    token names the attempt that token claimed; and only the newest claim settles
    (DELIVERY_RESULT), a superseded one getting LEASE_LOST. (Dispatch leases only:
    reminders and escalations have their own tokens.)"""
    found = Fencing()
    newest: dict[str, int] = defaultdict(int)  # notification -> newest claimed attempt
    claimed: dict[str, dict[str, int]] = defaultdict(dict)  # notification -> token -> attempt

    def bad(e: EventView, why: str) -> None:
        found.problems.append(f"{e.notification_id} #{e.sequence} {e.kind}: {why}")

    for e in events:
        p, nid = e.payload, e.notification_id
        attempt, token = p.get("attempt"), p.get("lease_token")
        if e.kind == "ATTEMPT_STARTED":
            found.claims += 1
            if attempt != newest[nid] + 1:
                bad(e, f"claims attempt {attempt} after attempt {newest[nid]}")
            newest[nid] = attempt if isinstance(attempt, int) else newest[nid] + 1
        elif e.kind == "CHANNEL_ATTEMPT_STARTED":
            if attempt != newest[nid]:
                bad(e, f"starts attempt {attempt}, the newest claim is {newest[nid]}")
            elif claimed[nid].setdefault(token, attempt) != attempt:
                bad(e, f"token of attempt {claimed[nid][token]} reused by attempt {attempt}")
        elif e.kind == "CHANNEL_ATTEMPT_RESULT" or (
            e.kind == "LEASE_LOST" and not p.get("follow_up")
        ):
            if claimed[nid].get(token) != attempt:
                bad(e, f"token {token} did not claim attempt {attempt}")
            if e.kind == "LEASE_LOST":
                found.refused += 1
        elif e.kind == "DELIVERY_RESULT" and attempt != newest[nid]:
            bad(e, f"attempt {attempt} settled after attempt {newest[nid]} was claimed")
    return found
