"""``uns-admin policies put|activate|show|list``: one implementation for both modes.

The commands read their input, call a ``PolicyBackend`` and print each revision as
``services.policy_documents.revision_to_json`` does, so the output is the same on the database
(``services.policies.PolicyService``, ``cli.admin``) and over ``uns.v1.PolicyService``
(``cli.remote.policies.RemotePolicies``, with ``--target``). A remote ``put`` of a list
writes one revision per call (not one transaction).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from uns_server.cli.errors import UsageError, describe
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.policy import PolicyRevision
from uns_server.services.policies import PolicyInput
from uns_server.services.policy_documents import inputs_from_document, revision_to_json

PAGE_SIZE = 1000


class PolicyBackend(Protocol):
    """Where the policies are: the database, or a server."""

    async def put_many(
        self, items: Sequence[PolicyInput], *, activate: bool
    ) -> list[PolicyRevision]: ...

    async def activate(self, notification_type: str, revision: int) -> PolicyRevision: ...

    async def get(self, notification_type: str, revision: int) -> PolicyRevision: ...

    async def list_all(self, notification_type: str) -> list[PolicyRevision]:
        """Every revision of the type, newest first."""
        ...

    async def types(self) -> list[str]:
        """Every notification type with a policy, in name order."""
        ...


def load_policy_file(path: Path) -> tuple[list[PolicyInput], bool]:
    """Read and validate a policy file before touching the database: (inputs, is_list)."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        document = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise UsageError(f"{path}: not valid YAML or JSON: {problem}") from None
    try:
        return inputs_from_document(document), isinstance(document, list)
    except InvalidRequest as exc:
        raise UsageError(f"{path}: invalid policy: {describe(exc)}") from None


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


async def cmd_put(policies: PolicyBackend, args: argparse.Namespace) -> None:
    items, is_list = args.policy_inputs
    written = await policies.put_many(items, activate=args.activate)
    out = [revision_to_json(r) for r in written]
    _print_json(out if is_list else out[0])


async def cmd_activate(policies: PolicyBackend, args: argparse.Namespace) -> None:
    revision = await policies.activate(args.notification_type, args.revision)
    _print_json(revision_to_json(revision))


async def cmd_show(policies: PolicyBackend, args: argparse.Namespace) -> None:
    revision = await policies.get(args.notification_type, args.revision)
    _print_json(revision_to_json(revision))


async def cmd_list(policies: PolicyBackend, args: argparse.Namespace) -> None:
    """One type's revisions, newest first; without a type, every type's, in name order."""
    kinds = [args.notification_type] if args.notification_type else await policies.types()
    revisions = [r for kind in kinds for r in await policies.list_all(kind)]
    _print_json([revision_to_json(r) for r in revisions])


Command = Callable[[PolicyBackend, argparse.Namespace], Awaitable[None]]

COMMANDS: dict[str, Command] = {
    "put": cmd_put,
    "activate": cmd_activate,
    "show": cmd_show,
    "list": cmd_list,
}
