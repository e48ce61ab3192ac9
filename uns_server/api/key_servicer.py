"""``uns.v1.KeyService``: protobuf in, one ``services.keys`` call, protobuf out.

Every RPC requires the operator role. No response ever carries a key's hash; only
CreateApiKey carries a secret.
"""

from __future__ import annotations

from typing import Any

import grpc

from uns.v1 import key_service_pb2 as pb
from uns.v1 import key_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain.enums import Role
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.services import keys
from uns_server.services.auth import Authenticator, Principal

Ctx = grpc.aio.ServicerContext[Any, Any]

_TO_WIRE: dict[Role, Any] = {
    Role.PRODUCER: pb.ROLE_PRODUCER,
    Role.RESPONDER: pb.ROLE_RESPONDER,
    Role.OPERATOR: pb.ROLE_OPERATOR,
}
_FROM_WIRE = {int(v): k for k, v in _TO_WIRE.items()}
# Entries of CreateApiKeyRequest.roles: reading ~500k repeats (a 1 MiB request) held
# the event loop for 50-100 ms.
ROLES_MAX_ENTRIES = 64


def roles_from_wire(values: list[int]) -> list[Role]:
    """Domain roles; INVALID_REQUEST on ROLE_UNSPECIFIED or an unknown number. Each
    distinct value is checked once (repeats count once, and a 1 MiB request holds
    ~500k of them)."""
    roles: list[Role] = []
    for value in dict.fromkeys(values):
        role = _FROM_WIRE.get(int(value))
        if role is None:
            field = f"roles[{values.index(value)}]"
            raise InvalidRequest(
                f"{field}: not a role: {value}",
                metadata={"fields": field},
                violations=[FieldViolation(field, f"not a role: {value}")],
            )
        roles.append(role)
    return roles


def key_to_wire(key: keys.KeyInfo) -> pb.ApiKey:
    msg = pb.ApiKey(
        id=key.id,
        prefix=key.prefix,
        principal=key.principal,
        roles=[_TO_WIRE[r] for r in key.roles],
        description=key.description,
        responds_for=list(key.responds_for),
    )
    created = convert.timestamp(key.created_at)
    assert created is not None
    msg.create_time.CopyFrom(created)
    revoked = convert.timestamp(key.revoked_at)
    if revoked is not None:
        msg.revoke_time.CopyFrom(revoked)
    return msg


class KeyServicer(pb_grpc.KeyServiceServicer):
    def __init__(self, auth: Authenticator, service: keys.KeyService) -> None:
        self.auth = auth
        self.service = service

    @unary(Role.OPERATOR)
    async def CreateApiKey(
        self, request: pb.CreateApiKeyRequest, context: Ctx, principal: Principal
    ) -> pb.CreateApiKeyResponse:
        if len(request.roles) > ROLES_MAX_ENTRIES:  # counted before they are read
            raise InvalidRequest.of_field(
                "roles", f"must hold at most {ROLES_MAX_ENTRIES} entries (there are 3 roles)"
            )
        roles = roles_from_wire(list(request.roles))
        secret, key = await self.service.create(
            request.principal,
            roles,
            request.description,
            responds_for=list(request.responds_for),
        )
        return pb.CreateApiKeyResponse(secret=secret, api_key=key_to_wire(key))

    @unary(Role.OPERATOR)
    async def ListApiKeys(
        self, request: pb.ListApiKeysRequest, context: Ctx, principal: Principal
    ) -> pb.ListApiKeysResponse:
        page, token = await self.service.list_page(request.page_size, request.page_token)
        return pb.ListApiKeysResponse(
            api_keys=[key_to_wire(k) for k in page], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def RevokeApiKey(
        self, request: pb.RevokeApiKeyRequest, context: Ctx, principal: Principal
    ) -> pb.RevokeApiKeyResponse:
        key = await self.service.revoke(request.key)
        self.auth.forget_cached()  # its streams and calls here end at their next check
        return pb.RevokeApiKeyResponse(api_key=key_to_wire(key))
