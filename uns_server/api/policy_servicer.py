"""``uns.v1.PolicyService``: protobuf in, one ``PolicyService`` call, protobuf out.

Every RPC requires the operator role.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from uns.v1 import policy_service_pb2 as pb
from uns.v1 import policy_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain.enums import DeliveryMode, Priority, Role, Urgency
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.domain.policy import CHANNELS_MAX, PolicyRevision, PolicySpec
from uns_server.domain.policy.rules import RULES_MAX, RoutingRule
from uns_server.domain.policy.spec import ALLOWED_PRINCIPALS_MAX
from uns_server.domain.targets import TARGETS_MAX
from uns_server.domain.templates import TEMPLATES_MAX, Template
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.policies import PolicyInput, PolicyService, validate_type

Ctx = grpc.aio.ServicerContext[Any, Any]


def spec_from_wire(spec: pb.PolicySpec) -> PolicySpec:
    """Validates (INVALID_REQUEST with ``spec.<field>`` violations) and fills defaults.
    Past ``CHANNELS_MAX`` only one channel more is read (to be refused): turning ~100k
    names into Python strings alone held the event loop for 100+ ms."""
    return PolicySpec.build(
        channels=list(spec.channels[: CHANNELS_MAX + 1]),
        delivery_mode=convert.enum_from_wire(
            DeliveryMode, spec.delivery_mode, "spec.delivery_mode"
        ),
        require_ack=spec.require_ack,
        ack_timeout_minutes=spec.ack_timeout_minutes,
        priority=convert.enum_from_wire(Priority, spec.priority, "spec.priority"),
        dedup_window_seconds=spec.dedup_window_seconds,
        max_attempts=spec.max_attempts,
        quiet_hours=(
            {
                "time_zone": spec.quiet_hours.time_zone,
                "start": spec.quiet_hours.start,
                "end": spec.quiet_hours.end,
            }
            if spec.HasField("quiet_hours")
            else None
        ),
        reminder=convert.reminder_from_wire(spec.reminder) if spec.HasField("reminder") else None,
        escalation=convert.escalation_from_wire(spec.escalation),
        targets=convert.targets_from_wire(spec.targets[: TARGETS_MAX + 1]),
        escalation_loops=spec.escalation_loops,
        allowed_principals=list(spec.allowed_principals[: ALLOWED_PRINCIPALS_MAX + 1]),
        rules=[_rule_from_wire(r, i) for i, r in enumerate(spec.rules[: RULES_MAX + 1])],
        urgency=convert.enum_from_wire(Urgency, spec.urgency, "spec.urgency"),
        templates=[
            Template(t.channel_type, t.locale, t.title, t.body)
            for t in spec.templates[: TEMPLATES_MAX + 1]
        ],
    )


def _rule_from_wire(rule: pb.RoutingRule, i: int) -> RoutingRule:
    """Unparsed (``PolicySpec.build`` parses the filter and reports its problems)."""
    return RoutingRule(
        rule.filter,
        tuple(rule.channels[: CHANNELS_MAX + 1]),
        tuple(convert.targets_from_wire(rule.targets[: TARGETS_MAX + 1])),
        convert.enum_from_wire(Urgency, rule.urgency, f"spec.rules[{i}].urgency"),
    )


def _rule_to_wire(rule: RoutingRule) -> pb.RoutingRule:
    return pb.RoutingRule(
        filter=rule.filter,
        channels=list(rule.channels),
        targets=convert.targets(rule.targets),
        urgency=convert.enum_to_wire(rule.urgency, Urgency),
    )


def spec_to_wire(spec: PolicySpec) -> pb.PolicySpec:
    return pb.PolicySpec(
        channels=list(spec.channels),
        delivery_mode=convert.enum_to_wire(spec.delivery_mode, DeliveryMode),
        require_ack=spec.require_ack,
        ack_timeout_minutes=spec.ack_timeout_minutes,
        priority=convert.enum_to_wire(spec.priority, Priority),
        dedup_window_seconds=spec.dedup_window_seconds,
        max_attempts=spec.max_attempts,
        quiet_hours=convert.quiet_hours(spec.quiet_hours),
        reminder=convert.reminder(spec.reminder),
        escalation=convert.escalation(spec.escalation),
        targets=convert.targets(spec.targets),
        escalation_loops=spec.escalation_loops,
        allowed_principals=list(spec.allowed_principals),
        rules=[_rule_to_wire(r) for r in spec.rules],
        urgency=convert.enum_to_wire(spec.urgency, Urgency),
        templates=[
            pb.Template(channel_type=t.channel_type, locale=t.locale, title=t.title, body=t.body)
            for t in spec.templates
        ],
    )


def revision_to_wire(revision: PolicyRevision) -> pb.PolicyRevision:
    msg = pb.PolicyRevision(
        policy_id=revision.policy_id,
        notification_type=revision.notification_type,
        revision=revision.revision,
        spec=spec_to_wire(revision.spec),
        content_hash=revision.content_hash,
        state=(
            pb.POLICY_REVISION_STATE_ACTIVE
            if revision.active
            else pb.POLICY_REVISION_STATE_INACTIVE
        ),
        created_by=revision.created_by,
    )
    created = convert.timestamp(revision.created_at)
    assert created is not None
    msg.create_time.CopyFrom(created)
    activated = convert.timestamp(revision.activated_at)
    if activated is not None:
        msg.activate_time.CopyFrom(activated)
    return msg


def _put_input(request: pb.PutPolicyRevisionRequest) -> PolicyInput:
    """Validate type and spec together, so one answer lists every problem."""
    violations: list[FieldViolation] = []
    spec: PolicySpec | None = None
    try:
        validate_type(request.notification_type)
    except InvalidRequest as exc:
        violations += exc.violations
    try:
        spec = spec_from_wire(request.spec)
    except InvalidRequest as exc:
        violations += exc.violations
    if violations or spec is None:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        raise InvalidRequest(metadata={"fields": fields}, violations=violations)
    return PolicyInput(request.notification_type, spec)


class PolicyServicer(pb_grpc.PolicyServiceServicer):
    def __init__(self, auth: Authenticator, policies: PolicyService) -> None:
        self.auth = auth
        self.policies = policies

    @unary(Role.OPERATOR)
    async def PutPolicyRevision(
        self, request: pb.PutPolicyRevisionRequest, context: Ctx, principal: Principal
    ) -> pb.PutPolicyRevisionResponse:
        # In a thread: compiling 50 templates of 8,000 characters full of expressions
        # takes about half a second of CPU, which would hold every other call's loop.
        item = await asyncio.to_thread(_put_input, request)
        revision = await self.policies.put(principal.name, item, activate=request.activate)
        return pb.PutPolicyRevisionResponse(revision=revision_to_wire(revision))

    @unary(Role.OPERATOR)
    async def ActivatePolicyRevision(
        self, request: pb.ActivatePolicyRevisionRequest, context: Ctx, principal: Principal
    ) -> pb.ActivatePolicyRevisionResponse:
        revision = await self.policies.activate(request.notification_type, request.revision)
        return pb.ActivatePolicyRevisionResponse(revision=revision_to_wire(revision))

    @unary(Role.OPERATOR)
    async def GetPolicy(
        self, request: pb.GetPolicyRequest, context: Ctx, principal: Principal
    ) -> pb.GetPolicyResponse:
        revision = await self.policies.get(request.notification_type, request.revision)
        return pb.GetPolicyResponse(revision=revision_to_wire(revision))

    @unary(Role.OPERATOR)
    async def ListPolicyRevisions(
        self, request: pb.ListPolicyRevisionsRequest, context: Ctx, principal: Principal
    ) -> pb.ListPolicyRevisionsResponse:
        revisions, token = await self.policies.list(
            request.notification_type, request.page_size, request.page_token
        )
        return pb.ListPolicyRevisionsResponse(
            revisions=[revision_to_wire(r) for r in revisions], next_page_token=token
        )
