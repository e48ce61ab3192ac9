"""``uns-admin keys`` over ``uns.v1.KeyService`` (the remote mode)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from uns.v1 import key_service_pb2 as key_pb
from uns.v1 import key_service_pb2_grpc as key_grpc
from uns_clients import ClientConfig
from uns_server.cli.remote.connection import call
from uns_server.cli.remote.output import EXIT_OK, UsageError, table
from uns_server.domain.enums import Role
from uns_server.services import auth

_ROLE_TO_WIRE: dict[str, Any] = {
    "producer": key_pb.ROLE_PRODUCER,
    "responder": key_pb.ROLE_RESPONDER,
    "operator": key_pb.ROLE_OPERATOR,
}


def _role_name(value: int) -> str:
    return key_pb.Role.Name(value).removeprefix("ROLE_").lower()  # type: ignore[arg-type]


def responds_for_note(responds_for: Sequence[str]) -> str:
    """``, answering also for a,b`` for the key-created message (both modes)."""
    return f", answering also for {','.join(responds_for)}" if responds_for else ""


def _key_when(ts: Timestamp) -> str:
    """The database mode's format: seconds, Z."""
    return ts.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def cmd_keys_create(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    principal = args.principal.strip()
    if not principal:
        raise UsageError("--principal must not be empty")
    try:
        roles = sorted(auth.parse_roles(args.roles.split(",")))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not roles:
        raise UsageError("--roles needs at least one of producer, responder, operator")
    responds_for = sorted(auth.parse_responds_for(args.responds_for))
    if responds_for and Role.RESPONDER not in roles:
        raise UsageError("--responds-for needs the responder role in --roles")
    request = key_pb.CreateApiKeyRequest(
        principal=principal,
        roles=[_ROLE_TO_WIRE[r.value] for r in roles],
        description=args.description,
        responds_for=responds_for,
    )
    reply = await call(config, key_grpc.KeyServiceStub(channel).CreateApiKey, request)
    key = reply.api_key
    print(reply.secret, flush=True)
    print(
        f"created key {key.id} (prefix {key.prefix}) for {key.principal} with roles "
        f"{','.join(_role_name(r) for r in key.roles)}"
        f"{responds_for_note(list(key.responds_for))}. The secret above is shown only "
        "once: store it now. Clients send it as 'authorization: Bearer <key>'.",
        file=sys.stderr,
    )
    return EXIT_OK


async def cmd_keys_list(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    stub = key_grpc.KeyServiceStub(channel)
    found: list[key_pb.ApiKey] = []
    token = ""
    while True:
        request = key_pb.ListApiKeysRequest(page_size=1000, page_token=token)
        reply = await call(config, stub.ListApiKeys, request)
        found += reply.api_keys
        token = reply.next_page_token
        if not token:
            break
    table(
        ("ID", "PREFIX", "PRINCIPAL", "ROLES", "RESPONDS_FOR", "CREATED", "REVOKED"),
        (
            (
                k.id,
                k.prefix,
                k.principal,
                ",".join(_role_name(r) for r in k.roles),
                ",".join(k.responds_for) or "-",
                _key_when(k.create_time),
                _key_when(k.revoke_time) if k.HasField("revoke_time") else "-",
            )
            for k in found
        ),
    )
    return EXIT_OK


async def cmd_keys_revoke(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    target = args.key.strip()
    if not target:
        raise UsageError("give a key id or prefix")
    request = key_pb.RevokeApiKeyRequest(key=target)
    reply = await call(config, key_grpc.KeyServiceStub(channel).RevokeApiKey, request)
    key = reply.api_key
    print(
        f"revoked key {key.id} (prefix {key.prefix}, principal {key.principal}); "
        f"servers stop accepting it within {auth.CACHE_SECONDS:g} s",
        file=sys.stderr,
    )
    return EXIT_OK
