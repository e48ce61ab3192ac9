"""``uns-admin policies`` over ``uns.v1.PolicyService`` (the remote mode)."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import grpc

from uns.v1 import policy_service_pb2 as policy_pb
from uns.v1 import policy_service_pb2_grpc as policy_grpc
from uns_clients import ClientConfig
from uns_server.api.policy_servicer import spec_from_wire, spec_to_wire
from uns_server.cli.remote.connection import call
from uns_server.cli.remote.output import EXIT_OK
from uns_server.domain.policy import PolicyRevision
from uns_server.services.policies import PolicyInput, revision_to_json


def _revision(wire: policy_pb.PolicyRevision) -> dict[str, Any]:
    """The database mode's JSON view of a revision."""
    revision = PolicyRevision(
        policy_id=wire.policy_id,
        notification_type=wire.notification_type,
        revision=wire.revision,
        spec=spec_from_wire(wire.spec),
        content_hash=wire.content_hash,
        active=wire.state == policy_pb.POLICY_REVISION_STATE_ACTIVE,
        created_by=wire.created_by,
        created_at=wire.create_time.ToDatetime(tzinfo=UTC),
        activated_at=(
            wire.activate_time.ToDatetime(tzinfo=UTC) if wire.HasField("activate_time") else None
        ),
    )
    return revision_to_json(revision)


async def cmd_policies_put(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    items: list[PolicyInput]
    items, is_list = args.policy_inputs
    stub = policy_grpc.PolicyServiceStub(channel)
    out = []
    for item in items:
        request = policy_pb.PutPolicyRevisionRequest(
            notification_type=item.notification_type,
            spec=spec_to_wire(item.spec),
            activate=args.activate,
        )
        reply = await call(config, stub.PutPolicyRevision, request)
        out.append(_revision(reply.revision))
    print(json.dumps(out if is_list else out[0], indent=2))
    return EXIT_OK


async def cmd_policies_activate(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    request = policy_pb.ActivatePolicyRevisionRequest(
        notification_type=args.notification_type, revision=args.revision
    )
    stub = policy_grpc.PolicyServiceStub(channel)
    reply = await call(config, stub.ActivatePolicyRevision, request)
    print(json.dumps(_revision(reply.revision), indent=2))
    return EXIT_OK


async def cmd_policies_show(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    request = policy_pb.GetPolicyRequest(
        notification_type=args.notification_type, revision=args.revision
    )
    reply = await call(config, policy_grpc.PolicyServiceStub(channel).GetPolicy, request)
    print(json.dumps(_revision(reply.revision), indent=2))
    return EXIT_OK


async def cmd_policies_list(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    stub = policy_grpc.PolicyServiceStub(channel)
    revisions: list[dict[str, Any]] = []
    token = ""
    while True:
        request = policy_pb.ListPolicyRevisionsRequest(
            notification_type=args.notification_type, page_size=1000, page_token=token
        )
        reply = await call(config, stub.ListPolicyRevisions, request)
        revisions += [_revision(r) for r in reply.revisions]
        token = reply.next_page_token
        if not token:
            break
    print(json.dumps(revisions, indent=2))
    return EXIT_OK
