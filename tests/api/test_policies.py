"""uns.v1.PolicyService through the real server, on SQLite, and how revisions
reach SendNotification / Simulate (resolution, freezing, overrides)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.support.grpc_errors import rich_error
from tests.support.people import minutes, stub_as
from tests.support.server import Client, RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as npb
from uns.v1 import policy_service_pb2 as pb
from uns.v1 import policy_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t

TYPE = "demo.alert"


def policies(server: RunningServer, who: str = "oscar") -> Client:
    return stub_as(server, pb_grpc.PolicyServiceStub, who)


def spec(**fields: object) -> pb.PolicySpec:
    values: dict[str, object] = {
        "channels": ["log"],
        "delivery_mode": t.DELIVERY_MODE_GUARANTEED,
        "priority": t.PRIORITY_HIGH,
    }
    values.update(fields)
    return pb.PolicySpec(**values)  # type: ignore[arg-type]


async def put(
    client: Client, *, activate: bool = False, notification_type: str = TYPE, **fields: object
) -> pb.PolicyRevision:
    reply = await client.PutPolicyRevision(
        pb.PutPolicyRevisionRequest(
            notification_type=notification_type, spec=spec(**fields), activate=activate
        )
    )
    return reply.revision  # type: ignore[no-any-return]


async def test_put_activate_get(server: RunningServer) -> None:
    oscar = policies(server)
    written = await put(oscar)
    assert written.revision == 1 and written.notification_type == TYPE
    assert written.state == pb.POLICY_REVISION_STATE_INACTIVE
    assert written.created_by == "oscar" and written.create_time.seconds > 0
    assert not written.HasField("activate_time")
    # Defaults are filled in: 0 means 60 minutes, 300 seconds, 5 attempts.
    assert (
        written.spec.ack_timeout_minutes,
        written.spec.dedup_window_seconds,
        written.spec.max_attempts,
    ) == (60, 300, 5)
    assert len(written.content_hash) == 64

    with pytest.raises(grpc.aio.AioRpcError) as exc:  # written, but nothing ACTIVE yet
        await oscar.GetPolicy(pb.GetPolicyRequest(notification_type=TYPE))
    assert (rich_error(exc.value).code, rich_error(exc.value).reason) == (
        grpc.StatusCode.NOT_FOUND,
        "NOT_FOUND",
    )

    activated = (
        await oscar.ActivatePolicyRevision(
            pb.ActivatePolicyRevisionRequest(notification_type=TYPE, revision=1)
        )
    ).revision
    assert activated.state == pb.POLICY_REVISION_STATE_ACTIVE
    assert activated.HasField("activate_time")

    got = (await oscar.GetPolicy(pb.GetPolicyRequest(notification_type=TYPE))).revision
    assert got == activated
    assert list(got.spec.channels) == ["log"]
    assert got.spec.delivery_mode == t.DELIVERY_MODE_GUARANTEED
    assert got.spec.priority == t.PRIORITY_HIGH
    by_number = await oscar.GetPolicy(pb.GetPolicyRequest(notification_type=TYPE, revision=1))
    assert by_number.revision == activated


async def test_identical_content_returns_the_same_revision(server: RunningServer) -> None:
    oscar = policies(server)
    first = await put(oscar)
    again = await put(oscar)
    assert (again.revision, again.content_hash, again.policy_id) == (
        first.revision,
        first.content_hash,
        first.policy_id,
    )
    # Explicit defaults are the same content as implicit ones.
    explicit = await put(oscar, ack_timeout_minutes=60, dedup_window_seconds=300, max_attempts=5)
    assert explicit.revision == 1
    changed = await put(oscar, max_attempts=7)
    assert changed.revision == 2 and changed.content_hash != first.content_hash
    assert changed.policy_id == first.policy_id


async def test_concurrent_first_puts_of_a_new_type_all_land_under_one_policy(
    server: RunningServer,
) -> None:
    # Each put of a type it finds no policy for inserts one; on PostgreSQL all but one
    # of these lose that race on the unique type, and the store says so (FirstPutRace)
    # for the service to retry, rather than the caller getting INTERNAL.
    oscar = policies(server)
    written = await asyncio.gather(
        *(put(oscar, notification_type="race.alert", max_attempts=n) for n in range(1, 7))
    )
    assert sorted(r.revision for r in written) == [1, 2, 3, 4, 5, 6]
    assert len({r.policy_id for r in written}) == 1


async def test_new_revision_with_activate_switches(server: RunningServer) -> None:
    oscar = policies(server)
    await put(oscar, activate=True)
    second = await put(oscar, activate=True, priority=t.PRIORITY_LOW)
    assert second.revision == 2 and second.state == pb.POLICY_REVISION_STATE_ACTIVE
    active = (await oscar.GetPolicy(pb.GetPolicyRequest(notification_type=TYPE))).revision
    assert active.revision == 2 and active.spec.priority == t.PRIORITY_LOW
    old = (await oscar.GetPolicy(pb.GetPolicyRequest(notification_type=TYPE, revision=1))).revision
    assert old.state == pb.POLICY_REVISION_STATE_INACTIVE
    assert old.HasField("activate_time")  # it was active once

    # Back to revision 1: activation is a pointer swap, revisions stay immutable.
    back = await oscar.ActivatePolicyRevision(
        pb.ActivatePolicyRevisionRequest(notification_type=TYPE, revision=1)
    )
    assert back.revision.state == pb.POLICY_REVISION_STATE_ACTIVE
    assert back.revision.spec == old.spec


async def test_list_revisions_pages_newest_first(server: RunningServer) -> None:
    oscar = policies(server)
    for attempts in range(1, 6):
        await put(oscar, max_attempts=attempts)
    await put(oscar, notification_type="other.type")
    seen: list[int] = []
    token = ""
    pages = 0
    while True:
        page = await oscar.ListPolicyRevisions(
            pb.ListPolicyRevisionsRequest(notification_type=TYPE, page_size=2, page_token=token)
        )
        pages += 1
        seen += [r.revision for r in page.revisions]
        token = page.next_page_token
        if not token:
            break
    assert seen == [5, 4, 3, 2, 1] and pages == 3
    everything = await oscar.ListPolicyRevisions(
        pb.ListPolicyRevisionsRequest(notification_type=TYPE)
    )
    assert [r.revision for r in everything.revisions] == [5, 4, 3, 2, 1]
    assert not everything.next_page_token
    unknown = await oscar.ListPolicyRevisions(pb.ListPolicyRevisionsRequest(notification_type="x"))
    assert list(unknown.revisions) == []

    first = await oscar.ListPolicyRevisions(
        pb.ListPolicyRevisionsRequest(notification_type=TYPE, page_size=1)
    )
    coerced = await oscar.ListPolicyRevisions(  # AIP-158: above the maximum means the maximum
        pb.ListPolicyRevisionsRequest(notification_type=TYPE, page_size=1001)
    )
    assert coerced.revisions and not coerced.next_page_token
    for request in (
        pb.ListPolicyRevisionsRequest(notification_type=TYPE, page_token="garbage!"),
        pb.ListPolicyRevisionsRequest(
            notification_type="other.type", page_token=first.next_page_token
        ),
        pb.ListPolicyRevisionsRequest(notification_type=TYPE, page_size=-1),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await oscar.ListPolicyRevisions(request)
        err = rich_error(exc.value)
        assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")


async def test_invalid_spec_and_unknown_revisions(server: RunningServer) -> None:
    oscar = policies(server)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await oscar.PutPolicyRevision(
            pb.PutPolicyRevisionRequest(
                notification_type="bad type!",
                spec=pb.PolicySpec(channels=["Not Valid"], max_attempts=101),
            )
        )
    err = rich_error(exc.value)
    assert (err.code, err.reason, err.domain) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_REQUEST",
        "uns.v1",
    )
    assert {
        "notification_type",
        "spec.channels[0]",
        "spec.delivery_mode",
        "spec.max_attempts",
    } <= set(err.violations)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await oscar.PutPolicyRevision(
            pb.PutPolicyRevisionRequest(notification_type=TYPE, spec=spec(delivery_mode=9))
        )
    assert "spec.delivery_mode" in rich_error(exc.value).violations
    listed = await oscar.ListPolicyRevisions(pb.ListPolicyRevisionsRequest(notification_type=TYPE))
    assert list(listed.revisions) == []  # refused puts wrote nothing

    await put(oscar)
    for call in (
        oscar.ActivatePolicyRevision(
            pb.ActivatePolicyRevisionRequest(notification_type=TYPE, revision=2)
        ),
        oscar.ActivatePolicyRevision(
            pb.ActivatePolicyRevisionRequest(notification_type="unknown.type", revision=1)
        ),
        oscar.GetPolicy(pb.GetPolicyRequest(notification_type=TYPE, revision=7)),
        oscar.GetPolicy(pb.GetPolicyRequest(notification_type="unknown.type")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call
        err = rich_error(exc.value)
        assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")


async def test_accepted_notifications_keep_their_frozen_policy(server: RunningServer) -> None:
    oscar, alice = policies(server), server.stub("alice")
    await put(oscar, activate=True)
    sent = await alice.SendNotification(send_request(idempotency_key="before"))
    assert sent.delivery_mode == t.DELIVERY_MODE_GUARANTEED

    await put(oscar, delivery_mode=t.DELIVERY_MODE_BEST_EFFORT, priority=t.PRIORITY_LOW)
    await oscar.ActivatePolicyRevision(
        pb.ActivatePolicyRevisionRequest(notification_type=TYPE, revision=2)
    )

    frozen = (
        await alice.GetNotification(
            npb.GetNotificationRequest(notification_id=sent.notification_id)
        )
    ).notification.effective_policy
    assert frozen.policy_revision == 1
    assert frozen.delivery_mode == t.DELIVERY_MODE_GUARANTEED
    assert frozen.priority == t.PRIORITY_HIGH

    later = await alice.SendNotification(send_request(idempotency_key="after"))
    assert later.delivery_mode == t.DELIVERY_MODE_BEST_EFFORT
    resolved = (
        await alice.GetNotification(
            npb.GetNotificationRequest(notification_id=later.notification_id)
        )
    ).notification.effective_policy
    assert resolved.policy_revision == 2 and resolved.priority == t.PRIORITY_LOW
    assert resolved.policy_id == frozen.policy_id
    assert resolved.policy_hash != frozen.policy_hash


async def test_declaring_a_different_delivery_mode_than_the_active_policy_is_refused(
    server: RunningServer,
) -> None:
    oscar, alice = policies(server), server.stub("alice")
    # An INACTIVE revision does not constrain producers.
    await put(oscar)
    declared = await alice.SendNotification(
        send_request(idempotency_key="k0", delivery_mode=t.DELIVERY_MODE_BEST_EFFORT)
    )
    assert declared.delivery_mode == t.DELIVERY_MODE_BEST_EFFORT

    await oscar.ActivatePolicyRevision(
        pb.ActivatePolicyRevisionRequest(notification_type=TYPE, revision=1)
    )
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.SendNotification(
            send_request(idempotency_key="k1", delivery_mode=t.DELIVERY_MODE_BEST_EFFORT)
        )
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "POLICY_OVERRIDE")
    assert err.metadata["field"] == "delivery_mode"
    assert err.metadata["policy_revision"] == "1"
    assert "delivery_mode" in err.violations
    # Declaring the policy's own value is fine.
    same = await alice.SendNotification(
        send_request(idempotency_key="k2", delivery_mode=t.DELIVERY_MODE_GUARANTEED)
    )
    assert same.delivery_mode == t.DELIVERY_MODE_GUARANTEED


async def test_simulate_returns_the_policy_values(db_url: str, tmp_path: Path) -> None:
    channels = tmp_path / "channels.yaml"
    channels.write_text("audit-log:\n  type: log\n")
    server = await start_server(db_url, tmp_path, channels_file=str(channels))
    try:
        await _simulate_returns_the_policy_values(server)
    finally:
        await server.stop()


async def _simulate_returns_the_policy_values(server: RunningServer) -> None:
    oscar, alice = policies(server), server.stub("alice")
    before = await alice.Simulate(npb.SimulateRequest(request=send_request()))
    assert before.effective_policy.policy_revision == 0  # server defaults

    written = await put(
        oscar,
        activate=True,
        channels=["log", "audit-log"],
        delivery_mode=t.DELIVERY_MODE_BEST_EFFORT,
        require_ack=True,
        ack_timeout_minutes=15,
        priority=t.PRIORITY_CRITICAL,
        dedup_window_seconds=60,
        max_attempts=3,
    )
    sim = await alice.Simulate(npb.SimulateRequest(request=send_request()))
    e = sim.effective_policy
    assert list(sim.resolved_channels) == ["log", "audit-log"] == list(e.channels)
    assert sim.delivery_mode == t.DELIVERY_MODE_BEST_EFFORT == e.delivery_mode
    assert sim.require_ack and e.require_ack
    assert (e.ack_timeout_minutes, e.priority, e.dedup_window_seconds, e.max_attempts) == (
        15,
        t.PRIORITY_CRITICAL,
        60,
        3,
    )
    assert (e.policy_id, e.policy_revision, e.policy_hash) == (
        written.policy_id,
        1,
        written.content_hash,
    )
    listed = await oscar.ListPolicyRevisions(pb.ListPolicyRevisionsRequest(notification_type=TYPE))
    assert len(listed.revisions) == 1  # Simulate writes nothing


@pytest.mark.parametrize("who", ["alice", "rita"])
async def test_only_operators_may_call_policy_service(server: RunningServer, who: str) -> None:
    client = policies(server, who)
    calls = (
        client.PutPolicyRevision(pb.PutPolicyRevisionRequest(notification_type=TYPE, spec=spec())),
        client.ActivatePolicyRevision(
            pb.ActivatePolicyRevisionRequest(notification_type=TYPE, revision=1)
        ),
        client.GetPolicy(pb.GetPolicyRequest(notification_type=TYPE)),
        client.ListPolicyRevisions(pb.ListPolicyRevisionsRequest(notification_type=TYPE)),
    )
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call
        err = rich_error(exc.value)
        assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    async with grpc.aio.insecure_channel(server.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await pb_grpc.PolicyServiceStub(channel).GetPolicy(
                pb.GetPolicyRequest(notification_type=TYPE)
            )
    assert rich_error(exc.value).reason == "UNAUTHENTICATED"
    listed = await policies(server).ListPolicyRevisions(
        pb.ListPolicyRevisionsRequest(notification_type=TYPE)
    )
    assert list(listed.revisions) == []


async def test_reflection_lists_policy_service(server: RunningServer) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = refl.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        names: set[str] = set()
        async for response in responses:
            names = {s.name for s in response.list_services_response.service}
            break
    assert "uns.v1.PolicyService" in names


async def test_a_policy_naming_a_channel_this_server_lacks_is_refused(
    server: RunningServer,
) -> None:
    """SPEC §6: in its channels or an escalation step's, every such field listed; nothing
    is written."""
    assert server.app.channels.names() == ("log",)
    oscar = policies(server)
    step = t.EscalationStep(after=minutes(10), channels=["log", "pager"])
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await put(oscar, channels=["log", "hook"], require_ack=True, escalation=[step])
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_CHANNEL")
    assert err.metadata["channels"] == "hook,pager"
    assert set(err.violations) == {"spec.channels[1]", "spec.escalation[0].channels[1]"}
    assert "hook" in err.message and "log" in err.message  # what it lacks, what it has
    listed = await oscar.ListPolicyRevisions(pb.ListPolicyRevisionsRequest(notification_type=TYPE))
    assert list(listed.revisions) == []
    # The channels it has are accepted.
    assert (await put(oscar, channels=["log"])).revision == 1
