"""``uns-admin`` as a real subprocess, on both dialects: keys that work against a real
server until revoked, policies written on the database and seen by the server, exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.conftest import PostgresDatabases
from tests.support.grpc_errors import rich_error
from tests.support.server import send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.services.auth import hash_key
from uns_server.store import migrate

POLICY_YAML = """\
notification_type: demo.alert
spec:
  channels: [log]
  delivery_mode: GUARANTEED
  require_ack: true
  ack_timeout_minutes: 30
  priority: HIGH
  dedup_window_seconds: 300
  max_attempts: 5
"""


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def messages(self) -> list[str]:
        """stderr without the ``uns-admin: database ...`` line every database command
        prints first."""
        return [line for line in self.err.splitlines() if not line.startswith(DATABASE_LINE)]


DATABASE_LINE = "uns-admin: database "


async def admin(db_url: str | None, *args: str, cwd: Path | None = None) -> Result:
    """Run ``python -m uns_server.cli.admin`` with a clean UNS_* environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
    url = ["--database-url", db_url] if db_url is not None else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uns_server.cli.admin",
        *url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def ok(result: Result) -> Result:
    assert result.code == 0, result
    return result


async def send_as(target: str, key: str) -> pb.SendNotificationResponse:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.NotificationServiceStub(channel)
        reply: pb.SendNotificationResponse = await stub.SendNotification(
            send_request(), metadata=(("authorization", f"Bearer {key}"),), timeout=10
        )
        return reply


async def test_created_key_works_until_revoked(db_url: str, tmp_path: Path) -> None:
    created = ok(
        await admin(
            db_url,
            "keys",
            "create",
            "--principal",
            "carol",
            "--roles",
            "producer,responder",
            "--responds-for",
            "erin, dave,erin",
        )
    )
    # The secret, once, and nothing else on stdout; the hint goes to stderr.
    assert created.out.count("\n") == 1
    secret = created.out.strip()
    assert secret.startswith("uns_") and len(secret) > 40
    assert "only once" in created.err and secret not in created.err
    assert "answering also for dave,erin" in created.err

    server = await start_server(db_url, tmp_path)
    try:
        sent = await send_as(server.target, secret)
        assert sent.notification_id
        got = await server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=sent.notification_id)
        )
        assert got.notification.principal == "carol"
    finally:
        await server.stop()

    listed = ok(await admin(db_url, "keys", "list"))
    for text in (listed.out, listed.err):
        assert secret not in text and hash_key(secret) not in text
    header, *_ = listed.out.splitlines()
    assert header.split() == [
        "ID",
        "PREFIX",
        "PRINCIPAL",
        "ROLES",
        "RESPONDS_FOR",
        "CREATED",
        "REVOKED",
    ]
    (line,) = [row for row in listed.out.splitlines() if "carol" in row]
    key_id, prefix, principal, roles, responds_for, _created, revoked = line.split()
    assert secret.startswith(prefix) and len(prefix) < len(secret)
    assert (principal, roles, responds_for, revoked) == (
        "carol",
        "producer,responder",
        "dave,erin",
        "-",
    )

    revoked_run = ok(await admin(db_url, "keys", "revoke", prefix))
    assert key_id in revoked_run.err and secret not in revoked_run.err
    relisted = ok(await admin(db_url, "keys", "list"))
    (line,) = [row for row in relisted.out.splitlines() if "carol" in row]
    assert line.split()[-1] != "-"  # revocation time

    # A fresh server (empty lookup cache) refuses the revoked key.
    server = await start_server(db_url, tmp_path)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await send_as(server.target, secret)
        err = rich_error(exc.value)
        assert (err.code, err.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    finally:
        await server.stop()

    again = await admin(db_url, "keys", "revoke", key_id)
    assert again.code == 1 and "no active key" in again.err


@pytest.mark.parametrize(
    "args",
    [
        ("--principal", "x", "--roles", "wizard"),
        ("--principal", "x", "--roles", ","),
        ("--principal", " ", "--roles", "producer"),
        ("--roles", "producer"),
        ("--principal", "x", "--roles", "producer", "--responds-for", "y"),
        ("--principal", "x", "--roles", "responder", "--responds-for", "y" * 256),
    ],
)
async def test_keys_create_refuses_bad_input(db_url: str, args: tuple[str, ...]) -> None:
    result = await admin(db_url, "keys", "create", *args)
    assert result.code == 2, result
    assert result.out == ""
    listed = ok(await admin(db_url, "keys", "list"))
    assert len(listed.out.splitlines()) == 1  # header only: nothing was created


async def test_policies_put_show_list_activate(db_url: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_YAML)
    first = json.loads(ok(await admin(db_url, "policies", "put", "--file", str(policy))).out)
    assert (first["notification_type"], first["revision"], first["state"]) == (
        "demo.alert",
        1,
        "INACTIVE",
    )
    assert first["spec"] == {
        "channels": ["log"],
        "delivery_mode": "GUARANTEED",
        "require_ack": True,
        "ack_timeout_minutes": 30,
        "priority": "HIGH",
        "dedup_window_seconds": 300,
        "max_attempts": 5,
    }
    assert first["created_by"].startswith("uns-admin:")

    no_active = await admin(db_url, "policies", "show", "demo.alert")
    assert no_active.code == 1 and "no ACTIVE policy" in no_active.err
    shown = json.loads(
        ok(await admin(db_url, "policies", "show", "demo.alert", "--revision", "1")).out
    )
    assert shown == first

    activated = json.loads(ok(await admin(db_url, "policies", "activate", "demo.alert", "1")).out)
    assert activated["state"] == "ACTIVE" and activated["activate_time"]
    shown = json.loads(ok(await admin(db_url, "policies", "show", "demo.alert")).out)
    assert shown["revision"] == 1 and shown["state"] == "ACTIVE"

    # Identical content: same revision. A JSON list: several types, one transaction.
    again = json.loads(ok(await admin(db_url, "policies", "put", "--file", str(policy))).out)
    assert again["revision"] == 1
    many = tmp_path / "policies.json"
    many.write_text(
        json.dumps(
            [
                {
                    "notification_type": "demo.alert",
                    "spec": {
                        "channels": ["log"],
                        "delivery_mode": "DELIVERY_MODE_BEST_EFFORT",
                        "priority": "low",
                    },
                },
                {
                    "notification_type": "other.type",
                    "spec": {"channels": ["log"], "delivery_mode": "GUARANTEED"},
                },
            ]
        )
    )
    written = json.loads(
        ok(await admin(db_url, "policies", "put", "--file", str(many), "--activate")).out
    )
    assert [(w["notification_type"], w["revision"], w["state"]) for w in written] == [
        ("demo.alert", 2, "ACTIVE"),
        ("other.type", 1, "ACTIVE"),
    ]
    assert written[0]["spec"]["max_attempts"] == 5  # defaults filled in

    listed = json.loads(ok(await admin(db_url, "policies", "list", "demo.alert")).out)
    assert [(r["revision"], r["state"]) for r in listed] == [(2, "ACTIVE"), (1, "INACTIVE")]
    assert json.loads(ok(await admin(db_url, "policies", "list", "no.such")).out) == []

    missing = await admin(db_url, "policies", "activate", "demo.alert", "9")
    assert missing.code == 1 and "no revision 9" in missing.err

    # The server resolves with what uns-admin wrote.
    server = await start_server(db_url, tmp_path)
    try:
        sim = await server.stub("alice").Simulate(pb.SimulateRequest(request=send_request()))
    finally:
        await server.stop()
    assert sim.effective_policy.policy_revision == 2
    assert sim.delivery_mode == t.DELIVERY_MODE_BEST_EFFORT
    assert sim.effective_policy.priority == t.PRIORITY_LOW


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("notification_type: demo.alert\nspec: {channels: [log]}\n", "spec.delivery_mode"),
        (
            "notification_type: demo.alert\n"
            "spec: {channels: [log], delivery_mode: FAST, max_attempts: 500}\n",
            "spec.max_attempts",
        ),
        (
            "- notification_type: bad type\n  spec: {channels: [log], delivery_mode: GUARANTEED}\n",
            "[0].notification_type",
        ),
        ("{not: [valid", "not valid YAML"),
        ("[]", "no policy"),
    ],
)
async def test_policies_put_refuses_invalid_files(
    db_url: str, tmp_path: Path, content: str, expected: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(content)
    result = await admin(db_url, "policies", "put", "--file", str(policy), "--activate")
    assert result.code == 2, result
    assert result.out == ""
    assert expected in result.err
    assert len(result.messages) == 1 and "Traceback" not in result.err
    assert json.loads(ok(await admin(db_url, "policies", "list", "demo.alert")).out) == []


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
async def test_migrate_prints_the_head_revision(
    dialect: str, tmp_path: Path, postgres: PostgresDatabases
) -> None:
    if dialect == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    else:
        url = await postgres.new(migrated=False)
    before = await admin(url, "keys", "list")
    assert before.code == 1 and "uns-admin migrate" in before.err
    migrated = ok(await admin(url, "migrate"))
    assert migrated.out.strip() == migrate.head_revision()
    assert ok(await admin(url, "migrate")).out.strip() == migrate.head_revision()  # idempotent
    ok(await admin(url, "keys", "list"))


async def test_database_url_comes_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'env.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
    env["UNS_DATABASE_URL"] = url
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uns_server.cli.admin",
        "migrate",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    out, _err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0 and out.decode().strip() == migrate.head_revision()
    assert (tmp_path / "env.db").exists()


async def test_usage_and_failure_exit_codes(tmp_path: Path) -> None:
    usage = await admin(None)
    assert usage.code == 2 and "usage:" in usage.err
    unknown = await admin(None, "keys", "frobnicate")
    assert unknown.code == 2
    down = await admin("postgresql+asyncpg://nobody@127.0.0.1:1/uns", "keys", "list")
    assert down.code == 1 and down.out == ""
    assert len(down.messages) == 1 and "Traceback" not in down.err
    # The database it tried, without the password.
    hidden = await admin("postgresql://nobody:s3cret@127.0.0.1:1/uns", "keys", "list")
    assert f"{DATABASE_LINE}postgresql+asyncpg://nobody:***@127.0.0.1:1/uns" in hidden.err
    assert "s3cret" not in hidden.err
    bad_url = await admin("mysql://x@localhost/db", "keys", "list")
    assert bad_url.code == 2 and "--database-url" in bad_url.err


async def test_only_migrate_creates_a_database_and_each_command_names_its_own(
    tmp_path: Path,
) -> None:
    # From a directory with no database, the default ./uns.db: refused, not created.
    for command in (["keys", "list"], ["policies", "list", "demo.alert"], ["maintain"]):
        refused = await admin(None, *command, cwd=tmp_path)
        assert refused.code == 1, refused
        assert refused.out == ""
        assert refused.err.splitlines()[0] == f"{DATABASE_LINE}SQLite file {tmp_path / 'uns.db'}"
        assert refused.messages == [
            f"uns-admin: no database at {tmp_path / 'uns.db'}: give the server's "
            "--database-url (or UNS_DATABASE_URL), or create this one with `uns-admin migrate`"
        ]
        assert not (tmp_path / "uns.db").exists()
    migrated = ok(await admin(None, "migrate", cwd=tmp_path))
    assert migrated.err.splitlines()[0] == f"{DATABASE_LINE}SQLite file {tmp_path / 'uns.db'}"
    assert (tmp_path / "uns.db").exists()
    listed = ok(await admin(None, "keys", "list", cwd=tmp_path))
    assert listed.messages == [] and listed.err.startswith(DATABASE_LINE)
