"""The connection options of the remote commands and the channel they open."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from uns_clients import ClientConfig
from uns_clients._errors import error_from_rpc
from uns_server.cli.errors import UsageError

TARGET_DEFAULT = "127.0.0.1:50051"
TIMEOUT_SECONDS_DEFAULT = 30.0
# Database commands that run here instead when a target is given.
LOCAL_OR_REMOTE = frozenset(
    {"keys", "policies", "recipients", "rotations", "oncall", "heartbeats", "windows"}
)


def connection_arguments(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The connection options; ``suppress`` (after the command) leaves values given before
    the command alone unless repeated."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group(
        "server connection (dlq, show, ack; keys, policies, people and windows with "
        "--target or UNS_TARGET)"
    )
    group.add_argument(
        "--target",
        metavar="HOST:PORT",
        default=default(None),
        help=f"[UNS_TARGET] the UNS server, default {TARGET_DEFAULT}",
    )
    group.add_argument(
        "--api-key", metavar="KEY", default=default(None), help="[UNS_API_KEY] the API key"
    )
    group.add_argument(
        "--api-key-file",
        metavar="PATH",
        type=Path,
        default=default(None),
        help="read the API key from this file (first line)",
    )
    group.add_argument(
        "--tls",
        action="store_true",
        default=default(False),
        help="use TLS (required by the server on anything but loopback)",
    )
    group.add_argument(
        "--ca-file",
        metavar="PATH",
        type=Path,
        default=default(None),
        help="PEM CA bundle to verify the server with (implies --tls)",
    )
    group.add_argument(
        "--tls-server-name",
        metavar="NAME",
        default=default(None),
        help="verify the server certificate against this name (implies --tls)",
    )
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=default(TIMEOUT_SECONDS_DEFAULT),
        help=f"deadline of each call, default {TIMEOUT_SECONDS_DEFAULT:g}",
    )


def connection_parent() -> argparse.ArgumentParser:
    """A parent parser that accepts the connection options after a command (``keys`` and
    ``policies`` subcommands), leaving values given before the command alone."""
    connection = argparse.ArgumentParser(add_help=False)
    connection_arguments(connection, suppress=True)
    return connection


def wants_remote(args: argparse.Namespace) -> bool:
    """Whether a ``keys``, ``policies`` or people command runs against a server, not
    the database."""
    if args.command not in LOCAL_OR_REMOTE:
        return False
    return bool(getattr(args, "target", None) or os.environ.get("UNS_TARGET"))


def client_config(args: argparse.Namespace) -> ClientConfig:
    """The ``ClientConfig`` for the connection options and ``UNS_*`` environment."""
    target = args.target or os.environ.get("UNS_TARGET") or TARGET_DEFAULT
    if args.api_key is not None and args.api_key_file is not None:
        raise UsageError("give --api-key or --api-key-file, not both")
    if args.api_key_file is not None:
        try:
            lines = args.api_key_file.read_text().strip().splitlines()
        except OSError as exc:
            raise UsageError(f"cannot read {args.api_key_file}: {exc.strerror or exc}") from None
        api_key = lines[0].strip() if lines else ""
    else:
        api_key = args.api_key or os.environ.get("UNS_API_KEY") or ""
    if not api_key:
        raise UsageError("no API key: give --api-key, --api-key-file or set UNS_API_KEY")
    root_certificates = None
    if args.ca_file is not None:
        try:
            root_certificates = args.ca_file.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {args.ca_file}: {exc.strerror or exc}") from None
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    try:
        return ClientConfig(
            target=target,
            api_key=api_key,
            tls=bool(args.tls or root_certificates is not None or args.tls_server_name),
            root_certificates=root_certificates,
            tls_server_name=args.tls_server_name,
            timeout_seconds=args.timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def open_channel(config: ClientConfig) -> grpc.aio.Channel:
    options = config.grpc_options()
    if not config.tls:
        return grpc.aio.insecure_channel(config.target, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=config.root_certificates)
    return grpc.aio.secure_channel(config.target, credentials, options=options)


async def call(config: ClientConfig, method: Any, request: Message) -> Any:
    """One unary call with the key and deadline; typed errors (``UnsError``)."""
    try:
        return await method(
            request, metadata=config.auth_metadata(), timeout=config.timeout_seconds
        )
    except grpc.aio.AioRpcError as exc:
        raise error_from_rpc(exc) from exc
