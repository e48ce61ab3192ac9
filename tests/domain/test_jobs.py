"""The work row's rules (``domain.jobs``) and the message update as one of its kinds
(``domain.message_updates``), table-driven."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from uns_server.domain import jobs
from uns_server.domain.jobs import JobKind, JobState, SettleJob, rescued
from uns_server.domain.message_updates import (
    MAX_ATTEMPTS,
    Done,
    GiveUp,
    MessageUpdate,
    RetryAt,
    Settle,
    settle_job,
)
from uns_server.domain.records import Job

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
UPDATE = MessageUpdate("n1", "slack", {"ts": "1.2"}, {"state": "ACKED", "actor": "rita"})


def claimed(update: MessageUpdate = UPDATE) -> Job:
    new = update.job()
    return Job(
        id=7,
        kind=new.kind,
        notification_id=new.notification_id,
        args=new.args,
        state=JobState.RUNNING,
        attempt=1,
        max_attempts=new.max_attempts,
        scheduled_at=NOW,
        attempted_at=NOW,
        finalized_at=None,
        lease_token="tok",
        lease_until=NOW,
        last_error=None,
        created_at=NOW,
    )


@pytest.mark.parametrize(
    ("state", "scheduled_at"),
    [
        (JobState.AVAILABLE, None),  # only a claim starts work
        (JobState.RUNNING, None),
        (JobState.RETRYABLE, None),  # due again when?
        (JobState.COMPLETED, NOW),  # a final state is due never
    ],
)
def test_a_settle_ends_the_attempt_in_a_final_or_retryable_state(
    state: JobState, scheduled_at: datetime | None
) -> None:
    with pytest.raises(ValueError):
        SettleJob(1, "tok", state, scheduled_at)


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "expected"),
    [(1, 2, JobState.RETRYABLE), (2, 2, JobState.DISCARDED), (3, 2, JobState.DISCARDED)],
)
def test_a_rescued_lease_counts_its_lost_attempt(
    attempt: int, max_attempts: int, expected: JobState
) -> None:
    assert rescued(attempt, max_attempts) is expected


def test_a_message_update_is_a_job_and_back() -> None:
    new = UPDATE.job()
    assert (new.kind, new.notification_id, new.max_attempts) == (
        JobKind.MESSAGE_UPDATE,
        "n1",
        MAX_ATTEMPTS,
    )
    assert new.scheduled_at is None  # due at once
    assert MessageUpdate.of(claimed()) == UPDATE


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (Done(), SettleJob(7, "tok", JobState.COMPLETED)),
        (RetryAt(NOW, "busy"), SettleJob(7, "tok", JobState.RETRYABLE, NOW, "busy")),
        (GiveUp("gone"), SettleJob(7, "tok", JobState.DISCARDED, error="gone")),
    ],
)
def test_each_decision_settles_the_job_under_its_lease(
    decision: Settle, expected: SettleJob
) -> None:
    assert settle_job(claimed(), decision) == expected


def _mermaid_blocks(text: str) -> list[str]:
    return [part.split("```", 1)[0] for part in text.split("```mermaid")[1:]]


def test_the_architecture_page_draws_the_work_rows_diagram_beside_the_obligations() -> None:
    """The work row's diagram has one source, ``domain/jobs.py``'s docstring; the page
    shows the same block after the obligation's, and it names every state."""
    assert jobs.__doc__ is not None
    [block] = _mermaid_blocks(jobs.__doc__)
    page = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
    assert _mermaid_blocks(page.read_text())[1] == block
    drawn = set(re.findall(r"^\s*(\w+) --> ", block, re.MULTILINE))
    drawn |= set(re.findall(r"--> (\w+)", block))
    assert drawn == {s.value for s in JobState}
