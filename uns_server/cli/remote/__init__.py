"""Remote operator commands of ``uns-admin``: the dead-letter queue, one notification's
timeline and acknowledgements, over the public gRPC API (``uns_clients``), so they work
against any reachable server, with an API key, instead of on its database.

::

    uns-admin --target uns.example:443 --tls --api-key-file ~/.uns/operator.key dlq list
    uns-admin dlq replay --all --type ops.failing --reason "webhook fixed" --dry-run
    uns-admin dlq resolve 0b7c...e1 4f2a...9d --reason "handled by phone"
    uns-admin show 0b7c...e1
    uns-admin ack 0b7c...e1 --dismiss --metadata '{"ticket": "OPS-12"}'
    uns-admin --target uns.example:443 --tls keys create --principal ci --roles producer
    uns-admin --target uns.example:443 --tls policies put --file policy.yaml --activate

``keys``, ``policies``, ``recipients``, ``rotations``, ``oncall``, ``heartbeats`` and
``windows`` work on the database by default; given ``--target`` (or ``UNS_TARGET``) they
run here instead, over ``uns.v1.KeyService``, ``uns.v1.PolicyService``,
``uns.v1.RecipientService``, ``uns.v1.HeartbeatService`` and
``uns.v1.MaintenanceService``, with the same output. A remote ``policies put`` of a list
writes one revision per call (not one transaction).

Connection options are accepted before the command (like ``--database-url``) or after
it: ``--target HOST:PORT`` (env ``UNS_TARGET``, default ``127.0.0.1:50051``),
``--api-key`` (env ``UNS_API_KEY``) or ``--api-key-file``, ``--tls``, ``--ca-file``,
``--tls-server-name``, ``--timeout``.

Roles: ``keys``, ``policies`` and ``windows`` need an operator key; ``dlq`` needs an operator key
(a producer key lists only its own dead letters and is refused Replay/ResolveFailure);
``show`` an operator key (a producer or responder key sees only its tenants'
notifications, anything else is "not found"); ``ack`` a responder key (for its own
principal and those its key responds for) or an operator key.

Exit codes: 0 everything succeeded; 1 the server refused or failed some operation (each
refusal of a batch is reported on its own line, the batch goes on; a dry run exits 1 when
the real run would be refused for some id); 2 usage error. Only authentication,
permission and connection failures stop a batch, since every later call would fail the
same way.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from uns_clients import AsyncClient, ClientConfig, InvalidRequest, UnsError
from uns_server.cli import heartbeats as heartbeat_commands
from uns_server.cli import keys as key_commands
from uns_server.cli import people as people_commands
from uns_server.cli import policies as policy_commands
from uns_server.cli import windows as window_commands
from uns_server.cli.errors import UsageError
from uns_server.cli.remote.acks import cmd_ack
from uns_server.cli.remote.arguments import COMMANDS, add_arguments, check_usage
from uns_server.cli.remote.connection import (
    LOCAL_OR_REMOTE,
    TARGET_DEFAULT,
    client_config,
    connection_parent,
    open_channel,
    wants_remote,
)
from uns_server.cli.remote.dlq import cmd_dlq_bulk, cmd_dlq_list
from uns_server.cli.remote.heartbeats import RemoteHeartbeats
from uns_server.cli.remote.keys import RemoteKeys
from uns_server.cli.remote.output import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Stop,
    describe,
    fatal_message,
)
from uns_server.cli.remote.people import RemotePeople
from uns_server.cli.remote.policies import RemotePolicies
from uns_server.cli.remote.show import cmd_show
from uns_server.cli.remote.windows import RemoteWindows

__all__ = [
    "COMMANDS",
    "LOCAL_OR_REMOTE",
    "add_arguments",
    "connection_parent",
    "main",
    "wants_remote",
]


async def _run(args: argparse.Namespace, config: ClientConfig) -> int:
    if args.command == "keys":
        async with open_channel(config) as channel:
            await key_commands.COMMANDS[args.keys_command](RemoteKeys(channel, config), args)
        return EXIT_OK
    if args.command == "policies":
        command = policy_commands.COMMANDS[args.policies_command]
        async with open_channel(config) as channel:
            await command(RemotePolicies(channel, config), args)
        return EXIT_OK
    if args.command == "heartbeats":
        beat_command = heartbeat_commands.COMMANDS[args.heartbeats_command]
        async with open_channel(config) as channel:
            await beat_command(RemoteHeartbeats(channel, config), args)
        return EXIT_OK
    if args.command in ("recipients", "rotations", "oncall"):
        sub = getattr(args, f"{args.command}_command", None)
        async with open_channel(config) as channel:
            await people_commands.COMMANDS[(args.command, sub)](RemotePeople(channel, config), args)
        return EXIT_OK
    if args.command == "windows":
        async with open_channel(config) as channel:
            windows = RemoteWindows(channel, config)
            await window_commands.COMMANDS[args.windows_command](windows, args)
        return EXIT_OK
    async with AsyncClient(config) as client:
        if args.command == "dlq":
            if args.dlq_command == "list":
                return await cmd_dlq_list(client, args)
            return await cmd_dlq_bulk(client, args)
        if args.command == "show":
            return await cmd_show(client, args)
        return await cmd_ack(client, args)


def _fail(code: int, message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    """Run a remote command parsed by ``uns-admin``'s parser; returns the exit code."""
    # Retries are part of each call; the outcome is reported once, at the end.
    logging.getLogger("uns_clients").setLevel(logging.ERROR)
    try:
        check_usage(args)
        config = client_config(args)
        return asyncio.run(_run(args, config))
    except UsageError as exc:
        return _fail(EXIT_USAGE, str(exc))
    except Stop as exc:
        return _fail(EXIT_FAILURE, str(exc))
    except InvalidRequest as exc:
        # As the database mode: the server found the input invalid.
        code = EXIT_USAGE if args.command in LOCAL_OR_REMOTE else EXIT_FAILURE
        return _fail(code, describe(exc))
    except UnsError as exc:
        target = args.target or os.environ.get("UNS_TARGET") or TARGET_DEFAULT
        return _fail(EXIT_FAILURE, fatal_message(args.command, exc, target))
    except KeyboardInterrupt:
        return _fail(130, "interrupted")
