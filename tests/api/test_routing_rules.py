"""Routing rules (SPEC §7, issue 45) through a real server on SQLite:
the first rule whose filter matches a request replaces the policy's channels, targets
and urgency; the match is frozen in the effective policy (GetNotification), named by
Simulate, and the message goes where the rule says (a loopback webhook records it).
A filter that does not parse is INVALID_REQUEST on ``spec.rules[i].filter``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.http_receiver import HttpReceiver
from tests.support.people import operator_stub, put_policy
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import policy_service_pb2_grpc as ppb_grpc
from uns.v1 import types_pb2 as t

KIND = "db.replica_lag"


@pytest.fixture
async def hooks() -> AsyncIterator[HttpReceiver]:
    async with HttpReceiver() as receiver:
        yield receiver


@pytest.fixture
async def srv(db_url: str, tmp_path: Path, hooks: HttpReceiver) -> AsyncIterator[RunningServer]:
    channels = tmp_path / "channels.yaml"
    channels.write_text(
        "".join(
            f"{name}:\n  type: webhook\n  url: {hooks.url('/' + name)}\n  secret: s\n"
            for name in ("pager", "chat", "fallback")
        )
    )
    running = await start_server(db_url, tmp_path, channels_file=str(channels))
    try:
        yield running
    finally:
        await running.stop()


def routed_spec(**fields: Any) -> ppb.PolicySpec:
    values: dict[str, Any] = {
        "channels": ["fallback"],
        "delivery_mode": t.DELIVERY_MODE_GUARANTEED,
        "rules": [
            ppb.RoutingRule(
                filter="metadata.cluster = prod AND intent = SAFETY",
                channels=["pager"],
                urgency=t.URGENCY_HIGH,
            ),
            ppb.RoutingRule(filter="metadata.cluster = prod", channels=["pager", "chat"]),
            ppb.RoutingRule(filter='metadata.cluster = "staging"', channels=["chat"]),
            ppb.RoutingRule(
                filter="source = batch-jobs AND metadata.replicas = 3", channels=["chat"]
            ),
        ],
        "urgency": t.URGENCY_LOW,
    }
    values.update(fields)
    return ppb.PolicySpec(**values)


async def sent(srv: RunningServer, **fields: Any) -> t.Notification:
    reply = await srv.stub("alice").SendNotification(
        send_request(notification_type=KIND, wait_for_first_attempt=True, **fields)
    )
    got = await srv.stub("alice").GetNotification(
        pb.GetNotificationRequest(notification_id=reply.notification_id)
    )
    return got.notification


async def test_the_first_matching_rule_routes_and_is_frozen(
    srv: RunningServer, hooks: HttpReceiver
) -> None:
    revision = await put_policy(srv, KIND, routed_spec())
    assert revision.spec.rules[0].filter == "metadata.cluster = prod AND intent = SAFETY"
    cases = [
        # (metadata, intent, source) -> (rule index or None, channels, urgency)
        ({"cluster": "prod"}, "NOTIFICATION_INTENT_SAFETY", "db", (0, ["pager"], t.URGENCY_HIGH)),
        (
            {"cluster": "prod"},
            "NOTIFICATION_INTENT_WARNING",
            "db",
            (1, ["pager", "chat"], t.URGENCY_LOW),
        ),
        ({"cluster": "staging"}, "NOTIFICATION_INTENT_SAFETY", "db", (2, ["chat"], t.URGENCY_LOW)),
        (
            {"replicas": 3},
            "NOTIFICATION_INTENT_WARNING",
            "batch-jobs",
            (3, ["chat"], t.URGENCY_LOW),
        ),
        (
            {"cluster": "dev"},
            "NOTIFICATION_INTENT_SAFETY",
            "db",
            (None, ["fallback"], t.URGENCY_LOW),
        ),
        ({}, "NOTIFICATION_INTENT_WARNING", "db", (None, ["fallback"], t.URGENCY_LOW)),
    ]
    for n, (metadata, intent, source, (index, channels, urgency)) in enumerate(cases):
        got = await sent(srv, metadata=metadata, intent=intent, source=source, title=f"case {n}")
        policy = got.effective_policy
        assert list(policy.channels) == channels, (n, policy)
        assert policy.urgency == urgency
        if index is None:
            assert not policy.HasField("matched_rule_index") and policy.matched_rule_filter == ""
        else:
            assert policy.matched_rule_index == index
            assert policy.matched_rule_filter == revision.spec.rules[index].filter
        assert got.state == t.NOTIFICATION_STATE_DELIVERED
        # The message went exactly where the rule said.
        arrived = await hooks.wait_for_requests(sum(len(c[3][1]) for c in cases[: n + 1]))
        mine = [r.path.strip("/") for r in arrived if r.json()["data"]["title"] == f"case {n}"]
        assert sorted(mine) == sorted(channels)


async def test_simulate_names_the_rule_that_would_route(srv: RunningServer) -> None:
    await put_policy(srv, KIND, routed_spec())
    reply = await srv.stub("alice").Simulate(
        pb.SimulateRequest(
            request=send_request(notification_type=KIND, metadata={"cluster": "staging"})
        )
    )
    assert reply.effective_policy.matched_rule_index == 2
    assert reply.effective_policy.matched_rule_filter == 'metadata.cluster = "staging"'
    assert list(reply.resolved_channels) == ["chat"]
    assert list(reply.planned_steps[0].channels) == ["chat"]


@pytest.mark.parametrize(
    ("rule", "field", "words"),
    [
        (ppb.RoutingRule(filter="metadata.cluster prod", channels=["chat"]), "filter", "'='"),
        (ppb.RoutingRule(filter="cluster = prod", channels=["chat"]), "filter", "unknown field"),
        (ppb.RoutingRule(filter="intent = LOUD", channels=["chat"]), "filter", "unknown value"),
        (ppb.RoutingRule(filter='source = "open', channels=["chat"]), "filter", "not closed"),
        (
            ppb.RoutingRule(filter="metadata.slack_channel = x", channels=["chat"]),
            "filter",
            "reserved",
        ),
        (ppb.RoutingRule(filter="x" * 2000, channels=["chat"]), "filter", "at most 1024"),
        (ppb.RoutingRule(filter="source = a"), "channels", "at least one channel"),
    ],
)
async def test_an_invalid_rule_is_refused_on_its_field(
    srv: RunningServer, rule: ppb.RoutingRule, field: str, words: str
) -> None:
    spec = routed_spec(rules=[ppb.RoutingRule(filter="source = a", channels=["chat"]), rule])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await operator_stub(srv, ppb_grpc.PolicyServiceStub).PutPolicyRevision(
            ppb.PutPolicyRevisionRequest(notification_type=KIND, spec=spec)
        )
    err = rich_error(info.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert list(err.violations) == [f"spec.rules[1].{field}"]
    assert words in err.violations[f"spec.rules[1].{field}"]


async def test_a_rule_naming_a_channel_the_server_lacks_is_refused(srv: RunningServer) -> None:
    spec = routed_spec(rules=[ppb.RoutingRule(filter="source = a", channels=["nowhere"])])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await operator_stub(srv, ppb_grpc.PolicyServiceStub).PutPolicyRevision(
            ppb.PutPolicyRevisionRequest(notification_type=KIND, spec=spec)
        )
    err = rich_error(info.value)
    assert err.reason == "UNKNOWN_CHANNEL"
    assert "spec.rules[0].channels[0]" in err.violations
