"""Policy targets (SPEC §6 "People and on-call", issue 31 item 3) through a real
server, on SQLite: targets and escalation_loops validated and stored,
and Simulate naming who each planned step asks, a rotation resolved at the step's
planned time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.people import acked_spec, minutes, put_people, put_policy, put_rotation
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as npb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import types_pb2 as t

TYPE = "ops.paged"


@pytest.fixture
async def srv(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_server(db_url, tmp_path, dispatch_enabled=False)
    try:
        yield running
    finally:
        await running.stop()


async def people(server: RunningServer, *ids: str) -> None:
    await put_people(server, {rid: () for rid in ids})


async def put(server: RunningServer, **fields: Any) -> ppb.PolicyRevision:
    return await put_policy(server, TYPE, acked_spec(**fields))


async def test_unknown_people_and_rotations_are_refused_field_by_field(
    srv: RunningServer,
) -> None:
    await people(srv, "alice")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await put(
            srv,
            targets=[t.Target(recipient_id="alice"), t.Target(recipient_id="nobody")],
            escalation=[
                t.EscalationStep(after=minutes(10), targets=[t.Target(rotation_id="no-such")])
            ],
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    rich = rich_error(refused.value)
    assert rich.reason == "INVALID_REQUEST"
    assert list(rich.violations) == [
        "spec.targets[1].recipient_id",
        "spec.escalation[0].targets[0].rotation_id",
    ]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "spec.channels"),  # neither channels nor targets
        ({"targets": [t.Target()]}, "spec.targets[0]"),
        ({"targets": [t.Target(recipient_id="Not An Id")]}, "spec.targets[0].recipient_id"),
        ({"channels": ["log"], "escalation_loops": 1}, "spec.escalation_loops"),
        (
            {
                "channels": ["log"],
                "escalation": [t.EscalationStep(after=minutes(5), channels=["log"])],
                "escalation_loops": 10,
            },
            "spec.escalation_loops",
        ),
        ({"channels": ["log"], "escalation": [t.EscalationStep(after=minutes(5))]}, None),
    ],
)
async def test_shape_of_targets_and_loops(
    srv: RunningServer, fields: dict[str, Any], field: str | None
) -> None:
    field = field or "spec.escalation[0].channels"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await put(srv, **fields)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    rich = rich_error(refused.value)
    assert rich.reason == "INVALID_REQUEST"
    assert field in rich.violations


async def test_targets_round_trip_and_simulate_names_who_is_asked(srv: RunningServer) -> None:
    await people(srv, "alice", "bob", "carol")
    now = datetime.now(UTC)
    # alice is on call for the next 30 minutes, then bob, then alice again.
    await put_rotation(
        srv, "primary", ["alice", "bob"], start=now - timedelta(minutes=30), shift=minutes(60)
    )
    revision = await put(
        srv,
        channels=["log"],
        targets=[t.Target(rotation_id="primary")],
        reminder=t.Reminder(first_after=minutes(45), multiplier=1, max_count=1),
        escalation=[
            t.EscalationStep(after=minutes(20), targets=[t.Target(recipient_id="carol")]),
            t.EscalationStep(after=minutes(50), targets=[t.Target(rotation_id="primary")]),
        ],
        escalation_loops=1,
    )
    assert list(revision.spec.targets) == [t.Target(rotation_id="primary")]
    assert revision.spec.escalation_loops == 1
    assert list(revision.spec.escalation[0].targets) == [t.Target(recipient_id="carol")]

    reply = await srv.stub("alice").Simulate(
        npb.SimulateRequest(request=send_request(notification_type=TYPE))
    )
    assert reply.effective_policy.escalation_loops == 1
    assert list(reply.effective_policy.targets) == [t.Target(rotation_id="primary")]
    asked = [
        (
            npb.PlannedStepKind.Name(s.kind).removeprefix("PLANNED_STEP_KIND_"),
            s.number,
            round(s.offset.ToTimedelta().total_seconds() / 60),
            list(s.recipient_ids),
        )
        for s in reply.planned_steps
    ]
    # The rotation is resolved at each step's own time: alice until +30 min, bob until
    # +90, alice again; the second pass of the steps starts 50 minutes later.
    assert asked == [
        ("DELIVERY", 1, 0, ["alice"]),
        ("ESCALATION", 1, 20, ["carol"]),
        ("REMINDER", 1, 45, ["bob"]),
        ("ESCALATION", 2, 50, ["bob"]),
        ("ESCALATION", 3, 70, ["carol"]),
        ("ESCALATION", 4, 100, ["alice"]),
        ("DEADLINE", 1, 240, []),
    ]


async def test_policies_without_targets_keep_their_content_hash(srv: RunningServer) -> None:
    """Unset targets and loops are left out of the canonical content, so revisions
    written before them keep their hash (and are not rewritten as new revisions)."""
    first = await put(srv, channels=["log"])
    again = await put(srv, channels=["log"], escalation_loops=0, targets=[])
    assert again.revision == first.revision
    assert again.content_hash == first.content_hash
