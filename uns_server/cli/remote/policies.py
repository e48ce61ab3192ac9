"""``uns-admin policies`` over ``uns.v1.PolicyService`` (the remote mode): the
``cli.policies.PolicyBackend`` the shared commands call, answering with the same
``PolicyRevision`` values as the database mode."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC

import grpc

from uns.v1 import policy_service_pb2 as policy_pb
from uns.v1 import policy_service_pb2_grpc as policy_grpc
from uns_clients import ClientConfig
from uns_server.api.policy_servicer import spec_from_wire, spec_to_wire
from uns_server.cli.errors import UsageError
from uns_server.cli.policies import PAGE_SIZE
from uns_server.cli.remote.connection import call
from uns_server.domain.policy import PolicyRevision
from uns_server.services.policies import PolicyInput


def _revision(wire: policy_pb.PolicyRevision) -> PolicyRevision:
    """The database mode's view of a revision."""
    return PolicyRevision(
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


class RemotePolicies:
    def __init__(self, channel: grpc.aio.Channel, config: ClientConfig) -> None:
        self._stub = policy_grpc.PolicyServiceStub(channel)
        self._config = config

    async def put_many(
        self, items: Sequence[PolicyInput], *, activate: bool
    ) -> list[PolicyRevision]:
        """One call per revision: the API writes one at a time."""
        out = []
        for item in items:
            request = policy_pb.PutPolicyRevisionRequest(
                notification_type=item.notification_type,
                spec=spec_to_wire(item.spec),
                activate=activate,
            )
            reply = await call(self._config, self._stub.PutPolicyRevision, request)
            out.append(_revision(reply.revision))
        return out

    async def activate(self, notification_type: str, revision: int) -> PolicyRevision:
        request = policy_pb.ActivatePolicyRevisionRequest(
            notification_type=notification_type, revision=revision
        )
        reply = await call(self._config, self._stub.ActivatePolicyRevision, request)
        return _revision(reply.revision)

    async def get(self, notification_type: str, revision: int) -> PolicyRevision:
        request = policy_pb.GetPolicyRequest(notification_type=notification_type, revision=revision)
        reply = await call(self._config, self._stub.GetPolicy, request)
        return _revision(reply.revision)

    async def list_all(self, notification_type: str) -> list[PolicyRevision]:
        revisions: list[PolicyRevision] = []
        token = ""
        while True:
            request = policy_pb.ListPolicyRevisionsRequest(
                notification_type=notification_type, page_size=PAGE_SIZE, page_token=token
            )
            reply = await call(self._config, self._stub.ListPolicyRevisions, request)
            revisions += [_revision(r) for r in reply.revisions]
            token = reply.next_page_token
            if not token:
                return revisions

    async def types(self) -> list[str]:
        # uns.v1.PolicyService lists one type's revisions (ListPolicyRevisions needs it).
        raise UsageError(
            "policies list without TYPE reads every type from the database: run it with "
            "--database-url (not --target), or name the TYPE"
        )
