"""``uns-admin keys`` over ``uns.v1.KeyService`` (the remote mode): the ``cli.keys.Keys``
the shared commands call, answering with the same ``KeyInfo`` as the database mode."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import Any

import grpc

from uns.v1 import key_service_pb2 as key_pb
from uns.v1 import key_service_pb2_grpc as key_grpc
from uns_clients import ClientConfig
from uns_server.cli.remote.connection import call
from uns_server.domain.enums import Role
from uns_server.services.keys import KeyInfo

_ROLE_TO_WIRE: dict[str, Any] = {
    "producer": key_pb.ROLE_PRODUCER,
    "responder": key_pb.ROLE_RESPONDER,
    "operator": key_pb.ROLE_OPERATOR,
}


def _role_name(value: int) -> str:
    return key_pb.Role.Name(value).removeprefix("ROLE_").lower()  # type: ignore[arg-type]


def key_info(wire: key_pb.ApiKey) -> KeyInfo:
    """The database mode's view of a key (roles in the server's order)."""
    return KeyInfo(
        id=wire.id,
        prefix=wire.prefix,
        principal=wire.principal,
        roles=tuple(Role(_role_name(r)) for r in wire.roles),
        responds_for=tuple(wire.responds_for),
        description=wire.description,
        created_at=wire.create_time.ToDatetime(tzinfo=UTC),
        revoked_at=(
            wire.revoke_time.ToDatetime(tzinfo=UTC) if wire.HasField("revoke_time") else None
        ),
    )


class RemoteKeys:
    def __init__(self, channel: grpc.aio.Channel, config: ClientConfig) -> None:
        self._stub = key_grpc.KeyServiceStub(channel)
        self._config = config

    async def create(
        self,
        principal: str,
        roles: Iterable[Role],
        description: str,
        responds_for: Iterable[str] = (),
    ) -> tuple[str, KeyInfo]:
        request = key_pb.CreateApiKeyRequest(
            principal=principal,
            roles=[_ROLE_TO_WIRE[r.value] for r in sorted(roles)],
            description=description,
            responds_for=list(responds_for),
        )
        reply = await call(self._config, self._stub.CreateApiKey, request)
        return reply.secret, key_info(reply.api_key)

    async def list_all(self) -> list[KeyInfo]:
        found: list[KeyInfo] = []
        token = ""
        while True:
            request = key_pb.ListApiKeysRequest(page_size=1000, page_token=token)
            reply = await call(self._config, self._stub.ListApiKeys, request)
            found += [key_info(k) for k in reply.api_keys]
            token = reply.next_page_token
            if not token:
                return found

    async def revoke(self, key: str) -> KeyInfo:
        request = key_pb.RevokeApiKeyRequest(key=key)
        reply = await call(self._config, self._stub.RevokeApiKey, request)
        return key_info(reply.api_key)
