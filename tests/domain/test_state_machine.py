"""The lifecycle as a Hypothesis state machine over the pure domain rules (issue 21).

Random sequences of sends (leaders, followers inside a dedup window, repeats of an
idempotency key), claims, settlements with each outcome, lease expiries, answers (ack,
dismiss, repeats by the same and by another actor), clock moves and the ack expiry
sweep, withdrawals, replays and resolutions. Every step asks the domain function the
worker or service asks (``decide_admission``, ``decide_claim``, ``decide_settlement``,
``decide_hand_off``, ``decide_ack``, ``decide_withdrawal``, the Replay / ResolveFailure
checks) and stores what it decides, as the store would; no database. After every step
the invariants hold: each notification's and each ack's history is a walk of the
diagram in ``domain/lifecycle.py``'s docstring (shown in docs/ARCHITECTURE.md), leaving a
terminal state only through its documented
door (a dead letter through Replay, ResolveFailure or withdrawal; a follower through
promotion); ``cycle_attempts`` never exceeds ``max_attempts``; one dedup owner per
window, and every pending follower hangs on exactly one pending leader.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from uns_server.domain import admission, lifecycle, moves
from uns_server.domain.acks import AckTarget, decide_ack
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Priority, Status
from uns_server.domain.errors import (
    AckConflict,
    AckDeadlinePassed,
    AckNotPending,
    NotDeadLettered,
    NotWithdrawable,
    ReplayBlocked,
)
from uns_server.domain.lifecycle import ChannelAnswer, Settling
from uns_server.domain.policy import EffectivePolicy, PolicySpec
from uns_server.domain.records import DedupWindow
from uns_server.domain.withdrawal import Repeat, Scope, WithdrawalRow, decide_withdrawal

DIAGRAM = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
START = "[*]"
# The diagram's states: DB statuses, plus FOLLOWING (PENDING with ``dedup_owner_id``)
# and the ack's (prefixed where a status has the same name).
PENDING, FOLLOWING, DEDUPLICATED = "PENDING", "FOLLOWING", "DEDUPLICATED"
DELIVERED, FAILED, WITHDRAWN = "DELIVERED", "FAILED", "WITHDRAWN"
ACK_PENDING, ACK_WITHDRAWN = "ACK_PENDING", "ACK_WITHDRAWN"
TERMINAL = {DELIVERED, DEDUPLICATED, WITHDRAWN}
K = EventKind
# Which event moves a notification (or its ack) along which edge.
MOVES: dict[EventKind, frozenset[tuple[str, str]]] = {
    K.ACCEPTED: frozenset({(START, PENDING)}),
    K.DEDUP_LINKED: frozenset({(START, FOLLOWING), (START, DEDUPLICATED)}),
    K.ATTEMPT_STARTED: frozenset({(PENDING, PENDING)}),
    K.DELIVERY_RESULT: frozenset(
        {(PENDING, PENDING), (PENDING, DELIVERED), (PENDING, FAILED), (START, ACK_PENDING)}
    ),
    K.DEDUP_OWNER_PROMOTED: frozenset({(FOLLOWING, PENDING)}),
    K.DEDUP_RELINKED: frozenset({(FOLLOWING, FOLLOWING)}),
    K.DEDUP_SATISFIED: frozenset({(FOLLOWING, DEDUPLICATED)}),
    K.REPLAY_REQUESTED: frozenset({(FAILED, PENDING)}),
    K.FAILURE_RESOLVED: frozenset({(FAILED, FAILED)}),
    K.WITHDRAWN: frozenset(
        {(PENDING, WITHDRAWN), (FOLLOWING, WITHDRAWN), (FAILED, WITHDRAWN)}
        | {(ACK_PENDING, ACK_WITHDRAWN)}
    ),
    K.ACKED: frozenset({(ACK_PENDING, "ACKED")}),
    K.DISMISSED: frozenset({(ACK_PENDING, "DISMISSED")}),
    K.TIMED_OUT: frozenset({(ACK_PENDING, "TIMED_OUT")}),
}
# The doors out of a FAILED dead letter and out of FOLLOWING.
DEAD_LETTER_DOORS = {K.REPLAY_REQUESTED, K.FAILURE_RESOLVED, K.WITHDRAWN}
FOLLOWER_DOORS = {K.DEDUP_OWNER_PROMOTED, K.DEDUP_RELINKED, K.DEDUP_SATISFIED, K.WITHDRAWN}

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=10)
# The policy every send resolves to (only its dedup window matters to admission).
EFFECTIVE = EffectivePolicy.of(
    PolicySpec(
        channels=("slack",),
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        ack_timeout_minutes=30,
        priority=Priority.NORMAL,
        dedup_window_seconds=int(WINDOW.total_seconds()),
        max_attempts=3,
    ),
    policy_id=None,
    policy_revision=0,
    policy_hash=None,
)
ACK_MINUTES = 30
CHANNELS = ("slack",)
ANSWERS = {
    "accepted": ChannelAnswer("slack", True),
    "transient": ChannelAnswer("slack", False, True, "503"),
    "permanent": ChannelAnswer("slack", False, False, "404"),
}


def mermaid_block(text: str) -> str:
    return text.split("```mermaid", 1)[1].split("```", 1)[0]


def diagram_edges() -> frozenset[tuple[str, str]]:
    """The edges of the Mermaid state diagram in ``domain/lifecycle.py``'s docstring."""
    assert lifecycle.__doc__ is not None
    block = mermaid_block(lifecycle.__doc__)
    edges = re.findall(r"^\s*(\[\*\]|\w+) --> (\[\*\]|\w+)", block, re.MULTILINE)
    return frozenset(edges)


def test_the_architecture_page_renders_the_domain_diagram() -> None:
    """The diagram's one source is the domain's docstring; the docs show the same block."""
    assert lifecycle.__doc__ is not None
    assert mermaid_block(DIAGRAM.read_text()) == mermaid_block(lifecycle.__doc__)


EDGES = diagram_edges()


def test_the_model_moves_along_the_drawn_edges_and_draws_no_other() -> None:
    moved = frozenset().union(*MOVES.values())
    assert moved <= EDGES, moved - EDGES
    undrawn = {(a, b) for a, b in EDGES - moved if b != START}
    # Reminders and escalation steps (domain.schedule) keep the ack PENDING.
    assert undrawn == {(ACK_PENDING, ACK_PENDING)}


@dataclass
class Note:
    id: str
    key: str | None
    mode: str
    max_attempts: int
    require_ack: bool
    state: str = START
    generation: int | None = None
    owner_id: str | None = None  # its dedup leader (a follower, or deduplicated at once)
    successor_id: str | None = None
    dead_letter: bool = False
    attempts: int = 0
    cycle: int = 1
    cycle_attempts: int = 0
    leased: bool = False
    succeeded: tuple[str, ...] = ()
    ack: str = START
    ack_actor: str | None = None
    deadline: datetime | None = None
    withdrawn_by: str | None = None
    walk: list[tuple[EventKind, str, str]] = field(default_factory=list)
    ack_walk: list[tuple[EventKind, str, str]] = field(default_factory=list)

    @property
    def status(self) -> str:
        """The stored status (a follower is PENDING)."""
        return PENDING if self.state == FOLLOWING else self.state

    @property
    def ack_status(self) -> str | None:
        return {START: None, ACK_PENDING: "PENDING", ACK_WITHDRAWN: "WITHDRAWN"}.get(
            self.ack, self.ack
        )


@dataclass
class Window:
    owner_id: str
    generation: int
    until: datetime


ids = st.integers(min_value=0, max_value=1000)
actors = st.sampled_from(["ann", "bob"])


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.notes: dict[str, Note] = {}
        self.windows: dict[str, Window] = {}

    # -- helpers -------------------------------------------------------------------

    def _pick(self, i: int, *, when: Callable[[Note], bool] | None = None) -> Note | None:
        found = [n for n in self.notes.values() if when is None or when(n)]
        return found[i % len(found)] if found else None

    def _move(self, n: Note, kind: EventKind, to: str) -> None:
        if n.state in TERMINAL:
            raise AssertionError(f"{n.id} left terminal {n.state} by {kind}")
        if n.state == FAILED:
            assert n.dead_letter and kind in DEAD_LETTER_DOORS, (n, kind)
        if n.state == FOLLOWING:
            assert kind in FOLLOWER_DOORS, (n, kind)
        n.walk.append((kind, n.state, to))
        n.state = to

    def _move_ack(self, n: Note, kind: EventKind, to: str) -> None:
        n.ack_walk.append((kind, n.ack, to))
        n.ack = to

    def _followers(self, leader: Note) -> list[Note]:
        """Pending followers in promotion order (oldest first)."""
        return [f for f in self.notes.values() if f.state == FOLLOWING and f.owner_id == leader.id]

    def _claim(self, n: Note, *, recovered: bool) -> None:
        decision = lifecycle.decide_claim(
            attempts=n.attempts,
            cycle_attempts=n.cycle_attempts,
            max_attempts=n.max_attempts,
            recovered=recovered,
            delivery_mode=n.mode,
        )
        if isinstance(decision, lifecycle.StartAttempt):
            n.attempts, n.cycle_attempts = decision.attempt, decision.cycle_attempt
            n.leased = True
            self._move(n, K.ATTEMPT_STARTED, PENDING)
        else:
            assert decision.interrupted == recovered
            self._fail(n, decision.dead_letter)

    def _fail(self, n: Note, dead_letter: bool) -> None:
        n.dead_letter = dead_letter
        n.leased = False
        self._move(n, K.DELIVERY_RESULT, FAILED)
        followers = self._followers(n)
        owner = None
        window = self.windows.get(n.key) if n.key else None
        if not followers and window is not None:
            o = self.notes[window.owner_id]
            if o.generation is not None:
                owner = lifecycle.DedupOwner(o.id, Status(o.status), o.generation, window.until)
        hand_off = lifecycle.decide_hand_off(
            leader_id=n.id,
            leader_generation=n.generation,
            pending_followers=[lifecycle.Follower(f.id, f.generation or 0) for f in followers],
            window_owner=owner,
            now=self.now,
        )
        if hand_off is None:
            assert not followers
            return
        n.successor_id = hand_off.successor_id
        if not hand_off.promoted:
            assert hand_off.successor_id != n.id
            return
        successor = self.notes[hand_off.successor_id]
        assert successor is followers[0]
        successor.owner_id = None
        self._move(successor, K.DEDUP_OWNER_PROMOTED, PENDING)
        for fid in hand_off.relinked:
            self.notes[fid].owner_id = successor.id
            self._move(self.notes[fid], K.DEDUP_RELINKED, FOLLOWING)
        assert n.key is not None and window is not None
        window.owner_id = successor.id

    # -- rules ---------------------------------------------------------------------

    @initialize(key=st.sampled_from([None, "k1"]), mode=st.sampled_from(list(DeliveryMode)))
    def delivered_with_an_ack(self, key: str | None, mode: DeliveryMode) -> None:
        """Every run starts with an ack to answer and a guaranteed dedup leader with a
        follower, on its last attempt (a short run would rarely build them)."""
        self.send(key, mode, 3, True)
        self.attempt(0, "accepted")
        self.send("k2", DeliveryMode.GUARANTEED, 1, False)
        self.send("k2", DeliveryMode.GUARANTEED, 1, False)

    @rule(
        key=st.sampled_from([None, "k1", "k2"]),
        mode=st.sampled_from(list(DeliveryMode)),
        max_attempts=st.integers(min_value=1, max_value=3),
        require_ack=st.booleans(),
    )
    def send(
        self, key: str | None, mode: DeliveryMode, max_attempts: int, require_ack: bool
    ) -> None:
        n = Note(f"n{len(self.notes)}", key, mode.value, max_attempts, require_ack)
        self.notes[n.id] = n
        window = self.windows.get(key) if key else None
        owner = self.notes[window.owner_id] if window else None
        # As intake reads it under the window's lock, then asks the domain.
        read = admission.Fresh(
            EFFECTIVE,
            key,
            DedupWindow(key, window.until, window.owner_id, window.generation)
            if key and window
            else None,
            admission.WindowOwner(owner.id, Status(owner.status)) if owner else None,
        )
        decision = admission.decide_admission("fp", read, new_id=n.id, now=self.now)
        assert isinstance(decision, admission.Admit) and decision.notification_id == n.id
        # Seed 000 §1.1: a PENDING owner takes every send of its key, a DELIVERED one
        # those inside its window; anything else starts a new generation.
        coalesced = bool(
            window
            and owner
            and (owner.status == PENDING or (owner.status == DELIVERED and self.now < window.until))
        )
        assert (decision.owner is not None) == coalesced, (decision, owner, window)
        kinds = [e.kind for e in decision.events]
        if decision.owner is not None:
            assert owner is not None and decision.owner.id == owner.id
            assert kinds == [K.ACCEPTED, K.DEDUP_LINKED] and decision.window is None
            n.owner_id, n.generation = decision.owner.id, decision.generation
            to = FOLLOWING if decision.status == Status.PENDING else DEDUPLICATED
            assert to == (FOLLOWING if owner.status == PENDING else DEDUPLICATED)
            self._move(n, K.DEDUP_LINKED, to)
            return
        assert kinds == [K.ACCEPTED] and decision.status == Status.PENDING
        self._move(n, K.ACCEPTED, PENDING)
        change = decision.window
        if key is None:
            assert change is None and decision.generation is None
            return
        assert change is not None and change.key == key and change.owner_id == n.id
        assert change.insert == (window is None)
        assert change.generation == (window.generation + 1 if window else 1)
        n.generation = decision.generation
        self.windows[key] = Window(change.owner_id, change.generation, change.until)

    @rule(i=ids, same=st.booleans())
    def resend(self, i: int, same: bool) -> None:
        """A repeat of an earlier send's idempotency key: replayed or refused, whatever
        that notification's state; nothing moves."""
        n = self._pick(i)
        if n is None:
            return
        held = admission.Existing(n.id, "fp", Status(n.status), EFFECTIVE, n.owner_id)
        fingerprint = "fp" if same else "another payload"
        decision = admission.decide_admission(fingerprint, held, new_id="-", now=self.now)
        assert decision == (admission.IdempotentRepeat(held) if same else admission.Conflict(held))

    @rule(i=ids)
    def claim(self, i: int) -> None:
        n = self._pick(i, when=lambda n: n.state == PENDING and not n.leased)
        if n is not None:
            self._claim(n, recovered=False)

    @rule(i=ids)
    def lease_expires(self, i: int) -> None:
        """The worker died mid-attempt: the row is claimed again, recovered."""
        n = self._pick(i, when=lambda n: n.leased)
        if n is not None:
            n.leased = False
            self._claim(n, recovered=True)

    @rule(i=ids, answer=st.sampled_from(sorted(ANSWERS)))
    def settle(self, i: int, answer: str) -> None:
        n = self._pick(i, when=lambda n: n.leased)
        if n is not None:
            self._settle(n, answer)

    @rule(i=ids, answer=st.sampled_from(sorted(ANSWERS)))
    def attempt(self, i: int, answer: str) -> None:
        """Claim and settle in one step (the common path, so most runs get past it)."""
        n = self._pick(i, when=lambda n: n.state == PENDING and not n.leased)
        if n is not None:
            self._claim(n, recovered=False)
            if n.leased:
                self._settle(n, answer)

    def _settle(self, n: Note, answer: str) -> None:
        row = Settling(
            channels=CHANNELS,
            succeeded_before=n.succeeded,
            cycle_attempt=n.cycle_attempts,
            max_attempts=n.max_attempts,
            delivery_mode=n.mode,
            require_ack=n.require_ack,
            ack_timeout_minutes=ACK_MINUTES,
        )
        s = lifecycle.decide_settlement(row, [ANSWERS[answer]], self.now, rand=lambda: 0.5)
        n.succeeded = tuple(s.outcome["channels_succeeded"])  # type: ignore[arg-type]
        if s.status == Status.FAILED:
            assert answer == "permanent" or n.cycle_attempts >= n.max_attempts
            self._fail(n, s.dead_letter)
            return
        n.leased = False
        if s.status == Status.PENDING:
            assert answer == "transient" and s.next_attempt is not None
            self._move(n, K.DELIVERY_RESULT, PENDING)
            return
        assert answer == "accepted" and s.status == Status.DELIVERED
        self._move(n, K.DELIVERY_RESULT, DELIVERED)
        if n.require_ack:
            assert s.ack_status == AckStatus.PENDING and s.deadline is not None
            n.deadline = s.deadline
            self._move_ack(n, K.DELIVERY_RESULT, ACK_PENDING)
        for f in self._followers(n):
            self._move(f, K.DEDUP_SATISFIED, DEDUPLICATED)
        if n.key is not None:  # the window restarts from the delivery, owned by it
            window = self.windows[n.key]
            window.owner_id, window.until = n.id, self.now + WINDOW

    @rule(i=ids, actor=actors, dismiss=st.booleans(), any_note=st.booleans())
    def answer(self, i: int, actor: str, dismiss: bool, any_note: bool) -> None:
        n = self._pick(i, when=None if any_note else lambda n: n.ack != START)
        if n is None:
            return
        outcome = AckStatus.DISMISSED if dismiss else AckStatus.ACKED
        target = AckTarget(n.id, n.status, n.require_ack, n.ack_status, n.deadline, n.ack_actor)
        try:
            repeat = decide_ack(target, outcome, actor, self.now)
        except AckNotPending:
            assert n.ack in (START, ACK_WITHDRAWN)
            return
        except AckDeadlinePassed:
            assert n.ack == "TIMED_OUT" or (n.ack == ACK_PENDING and n.deadline <= self.now)  # type: ignore[operator]
            return
        except AckConflict:
            assert n.ack in ("ACKED", "DISMISSED")
            assert (n.ack_actor, n.ack) != (actor, outcome.value)
            return
        if repeat:
            assert (n.ack_actor, n.ack) == (actor, outcome.value)
            return
        assert n.ack == ACK_PENDING and n.deadline is not None and self.now < n.deadline
        n.ack_actor = actor
        self._move_ack(n, EventKind(outcome.value), outcome.value)

    @rule(minutes=st.integers(min_value=1, max_value=40))
    def clock_moves(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)

    @rule()
    def expiry_sweep(self) -> None:
        for n in self.notes.values():
            if n.ack == ACK_PENDING and n.deadline is not None and n.deadline <= self.now:
                n.ack_actor = "uns-timeout-worker"
                self._move_ack(n, K.TIMED_OUT, "TIMED_OUT")

    @rule(i=ids, actor=actors)
    def withdraw(self, i: int, actor: str) -> None:
        n = self._pick(i)
        if n is None:
            return
        target = WithdrawalRow(
            n.id, n.status, n.ack_status, n.dead_letter, n.deadline, n.owner_id, n.withdrawn_by
        )
        followers = tuple(f.id for f in self._followers(n))
        try:
            decision = decide_withdrawal(
                target, caller=actor, pending_followers=followers, now=self.now
            )
        except NotWithdrawable:
            assert n.state not in (PENDING, FOLLOWING)
            return
        if isinstance(decision, Repeat):
            assert n.withdrawn_by == actor
            return
        n.withdrawn_by = actor
        if decision.scope == Scope.ACK:  # before the deadline only (the sweep may lag)
            assert n.ack == ACK_PENDING and n.deadline is not None and self.now < n.deadline
            n.ack_actor = actor
            self._move_ack(n, K.WITHDRAWN, ACK_WITHDRAWN)
            return
        self._move(n, K.WITHDRAWN, WITHDRAWN)
        n.leased, n.dead_letter = False, False
        for fid in decision.followers:
            self.notes[fid].withdrawn_by = actor
            self._move(self.notes[fid], K.WITHDRAWN, WITHDRAWN)

    @rule(i=ids, any_note=st.booleans())
    def replay(self, i: int, any_note: bool) -> None:
        n = self._pick(i, when=None if any_note else lambda n: n.dead_letter)
        if n is None:
            return
        successor = self.notes.get(n.successor_id or "")
        try:
            lifecycle.check_dead_lettered(n.id, n.status, n.dead_letter)
            lifecycle.check_replay_unblocked(
                n.id, n.successor_id, successor.status if successor else None
            )
        except NotDeadLettered:
            assert not (n.state == FAILED and n.dead_letter)
            return
        except ReplayBlocked:
            assert successor is not None and successor.status in lifecycle.CARRYING
            return
        # Replaying while a successor carries the obligation would deliver it twice.
        assert successor is None or successor.state in (FAILED, WITHDRAWN), successor
        n.cycle, n.cycle_attempts = moves.DeadLetterReplay(n.id, n.cycle, self.now).cycle, 0
        n.succeeded = ()
        self._move(n, K.REPLAY_REQUESTED, PENDING)
        n.dead_letter = False

    @rule(i=ids, any_note=st.booleans())
    def resolve(self, i: int, any_note: bool) -> None:
        n = self._pick(i, when=None if any_note else lambda n: n.dead_letter)
        if n is None:
            return
        try:
            lifecycle.check_dead_lettered(n.id, n.status, n.dead_letter)
        except NotDeadLettered:
            assert not (n.state == FAILED and n.dead_letter)
            return
        self._move(n, K.FAILURE_RESOLVED, FAILED)
        n.dead_letter = False

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def attempts_stay_within_the_cycle(self) -> None:
        for n in self.notes.values():
            assert 0 <= n.cycle_attempts <= n.max_attempts, n
            assert not n.leased or n.state == PENDING, n

    @invariant()
    def every_history_is_a_walk_of_the_diagram(self) -> None:
        for n in self.notes.values():
            for walk, end in ((n.walk, n.state), (n.ack_walk, n.ack)):
                at = START
                for kind, a, b in walk:
                    assert a == at, walk
                    assert (a, b) in EDGES, (a, b)
                    assert (a, b) in MOVES[kind], (kind, a, b)
                    at = b
                assert at == end, (walk, end)
            assert n.ack == START or n.state == DELIVERED, n

    @invariant()
    def one_owner_per_window(self) -> None:
        for key, window in self.windows.items():
            owner = self.notes[window.owner_id]
            assert owner.key == key and owner.state != FOLLOWING, owner
            carriers = [
                n
                for n in self.notes.values()
                if n.key == key
                and n.generation == window.generation
                and n.state in (PENDING, FAILED, DELIVERED, WITHDRAWN)
                and n.owner_id is None
                and n.successor_id is None
            ]
            assert len(carriers) <= 1, carriers
        for f in self.notes.values():
            if f.state == FOLLOWING:
                leader = self.notes[f.owner_id or ""]
                assert leader.state == PENDING and leader.owner_id is None, (f, leader)
                assert (leader.key, leader.generation) == (f.key, f.generation), (f, leader)


Lifecycle.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
test_lifecycle_state_machine = Lifecycle.TestCase
