"""``uns-admin keys`` and ``uns-admin policies`` in remote mode (``--target``): a real
subprocess against a real server, over ``uns.v1.KeyService`` and ``uns.v1.PolicyService``
instead of the database, on both dialects. The output matches the database mode."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.support.server import KEYS, RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns_server.services import auth

TYPE = "remote.alert"
POLICY_YAML = f"""\
notification_type: {TYPE}
spec:
  channels: [log]
  delivery_mode: GUARANTEED
  require_ack: true
  ack_timeout_minutes: 30
  priority: HIGH
  dedup_window_seconds: 300
  max_attempts: 4
"""


@dataclass
class Result:
    code: int
    out: str
    err: str


async def admin(*args: str, api_key: str | None = None) -> Result:
    """``python -m uns_server.cli.admin`` in a subprocess (the in-process server keeps
    serving), with a clean ``UNS_*`` environment and ``api_key`` as ``UNS_API_KEY``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
    if api_key is not None:
        env["UNS_API_KEY"] = api_key
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uns_server.cli.admin",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


async def remote(server: RunningServer, who: str, *args: str) -> Result:
    return await admin("--target", server.target, *args, api_key=KEYS[who])


def ok(result: Result) -> Result:
    assert result.code == 0, result
    assert "Traceback" not in result.err, result
    return result


async def send_as(server: RunningServer, secret: str) -> pb.SendNotificationResponse:
    reply: pb.SendNotificationResponse = await server.stub(secret).SendNotification(send_request())
    return reply


async def test_a_remote_key_works_until_revoked_remotely(
    server: RunningServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The in-process server must not serve the revoked key from its lookup cache.
    monkeypatch.setattr(auth, "CACHE_SECONDS", 0.0)
    created = ok(
        await remote(
            server,
            "oscar",
            "keys",
            "create",
            "--principal",
            "carol",
            "--roles",
            "producer,responder",
            "--responds-for",
            "dave",
            "--description",
            "from ci",
        )
    )
    assert created.out.count("\n") == 1  # the secret, once, and nothing else on stdout
    secret = created.out.strip()
    assert secret.startswith("uns_") and len(secret) > 40
    assert "only once" in created.err and secret not in created.err

    sent = await send_as(server, secret)
    got = await server.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=sent.notification_id)
    )
    assert got.notification.principal == "carol"

    # The connection options also go after the command.
    listed = ok(await admin("keys", "list", "--target", server.target, "--api-key", KEYS["oscar"]))
    for text in (listed.out, listed.err):
        assert secret not in text and auth.hash_key(secret) not in text
    header, *rows = listed.out.splitlines()
    assert header.split() == [
        "ID",
        "PREFIX",
        "PRINCIPAL",
        "ROLES",
        "RESPONDS_FOR",
        "CREATED",
        "REVOKED",
    ]
    (line,) = [row for row in rows if "carol" in row]
    key_id, prefix, principal, roles, responds_for, _created, revoked = line.split()
    assert secret.startswith(prefix) and len(prefix) < len(secret)
    assert (principal, roles, responds_for, revoked) == (
        "carol",
        "producer,responder",
        "dave",
        "-",
    )
    assert "answering also for dave" in created.err
    # Identical to the database mode's listing.
    local = ok(await admin("--database-url", db_url, "keys", "list"))
    assert local.out == listed.out

    revoked_run = ok(await remote(server, "oscar", "keys", "revoke", prefix))
    assert key_id in revoked_run.err and secret not in revoked_run.err
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await send_as(server, secret)
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED

    relisted = ok(await remote(server, "oscar", "keys", "list"))
    (line,) = [row for row in relisted.out.splitlines() if "carol" in row]
    assert line.split()[-1] != "-" and secret not in relisted.out

    again = await remote(server, "oscar", "keys", "revoke", key_id)
    assert again.code == 1 and "no active key" in again.err, again


async def test_remote_key_input_is_checked(server: RunningServer) -> None:
    for args in (
        ("--principal", "x", "--roles", "wizard"),
        ("--principal", "x", "--roles", ","),
        ("--principal", " ", "--roles", "producer"),
        ("--principal", "x", "--roles", "producer", "--responds-for", "y"),
    ):
        result = await remote(server, "oscar", "keys", "create", *args)
        assert result.code == 2 and result.out == "", (args, result)
    long = await remote(
        server, "oscar", "keys", "create", "--principal", "x" * 300, "--roles", "producer"
    )
    assert long.code == 2 and "principal" in long.err, long  # the server's refusal
    long_tenant = await remote(
        server,
        "oscar",
        "keys",
        "create",
        "--principal",
        "x",
        "--roles",
        "responder",
        "--responds-for",
        "y" * 300,
    )
    assert long_tenant.code == 2 and "responds_for[0]" in long_tenant.err, long_tenant
    listed = ok(await remote(server, "oscar", "keys", "list"))
    assert len(listed.out.splitlines()) == 1  # header only: nothing was created


async def test_a_producer_key_is_refused(server: RunningServer, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_YAML)
    for args in (
        ("keys", "list"),
        ("keys", "create", "--principal", "mallory", "--roles", "operator"),
        ("keys", "revoke", "uns_abcdef"),
        ("policies", "put", "--file", str(policy), "--activate"),
        ("policies", "show", TYPE),
        ("policies", "list", TYPE),
        ("policies", "activate", TYPE, "1"),
    ):
        result = await remote(server, "alice", *args)
        assert result.code == 1, (args, result)
        assert "PERMISSION_DENIED" in result.err and "operator role" in result.err
        assert "Traceback" not in result.err and result.out == ""
    listed = ok(await remote(server, "oscar", "keys", "list"))
    assert "mallory" not in listed.out


async def test_remote_policies_put_activate_show_list(
    server: RunningServer, db_url: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_YAML)
    put = json.loads(
        ok(
            await remote(server, "oscar", "policies", "put", "--file", str(policy), "--activate")
        ).out
    )
    assert (put["notification_type"], put["revision"], put["state"]) == (TYPE, 1, "ACTIVE")
    assert put["created_by"] == "oscar" and put["spec"]["max_attempts"] == 4

    shown = ok(await remote(server, "oscar", "policies", "show", TYPE))
    assert json.loads(shown.out) == put
    # Identical to the database mode's output.
    local = ok(await admin("--database-url", db_url, "policies", "show", TYPE))
    assert local.out == shown.out

    alice = server.stub("alice")
    sim = await alice.Simulate(pb.SimulateRequest(request=send_request(notification_type=TYPE)))
    e = sim.effective_policy
    assert (e.policy_id, e.policy_revision, e.policy_hash) == (
        put["policy_id"],
        1,
        put["content_hash"],
    )
    assert list(e.channels) == ["log"] and e.max_attempts == 4 and e.require_ack

    # A second revision, written inactive, then activated remotely.
    policy.write_text(POLICY_YAML.replace("max_attempts: 4", "max_attempts: 2"))
    second = json.loads(
        ok(await remote(server, "oscar", "policies", "put", "--file", str(policy))).out
    )
    assert (second["revision"], second["state"]) == (2, "INACTIVE")
    sim = await alice.Simulate(pb.SimulateRequest(request=send_request(notification_type=TYPE)))
    assert sim.effective_policy.policy_revision == 1
    activated = json.loads(ok(await remote(server, "oscar", "policies", "activate", TYPE, "2")).out)
    assert (activated["revision"], activated["state"]) == (2, "ACTIVE")
    sim = await alice.Simulate(pb.SimulateRequest(request=send_request(notification_type=TYPE)))
    assert (sim.effective_policy.policy_revision, sim.effective_policy.max_attempts) == (2, 2)

    listed = json.loads(ok(await remote(server, "oscar", "policies", "list", TYPE)).out)
    assert [(r["revision"], r["state"]) for r in listed] == [(2, "ACTIVE"), (1, "INACTIVE")]
    local_list = ok(await admin("--database-url", db_url, "policies", "list", TYPE))
    assert json.loads(local_list.out) == listed
    first = json.loads(
        ok(await remote(server, "oscar", "policies", "show", TYPE, "--revision", "1")).out
    )
    assert first["state"] == "INACTIVE" and first["spec"] == put["spec"]

    missing = await remote(server, "oscar", "policies", "show", "remote.none")
    assert missing.code == 1 and "NOT_FOUND" in missing.err, missing


OVER_TIME_YAML = """\
notification_type: ops.over_time
spec:
  channels: [log]
  delivery_mode: GUARANTEED
  require_ack: true
  ack_timeout_minutes: 120
  quiet_hours: {time_zone: Europe/Paris, start: 22:00, end: "07:00"}
  reminder: {first_after: 15m, multiplier: 2, max_count: 3}
  escalation:
    - {after: 30m, channels: [pagerduty]}
    - {after: "5400s", channels: [pagerduty, email]}
"""


async def test_policies_with_time_blocks_put_from_yaml_remotely_and_locally(
    db_url: str, tmp_path: Path
) -> None:
    # The escalation steps name channels the server has (SPEC §6: UNKNOWN_CHANNEL).
    channels = tmp_path / "channels.yaml"
    channels.write_text("pagerduty:\n  type: log\nemail:\n  type: log\n")
    server = await start_server(db_url, tmp_path, channels_file=str(channels))
    try:
        await _time_blocks(server, db_url, tmp_path)
    finally:
        await server.stop()


async def _time_blocks(server: RunningServer, db_url: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(OVER_TIME_YAML)
    put = json.loads(
        ok(await remote(server, "oscar", "policies", "put", "--file", str(policy))).out
    )
    spec = put["spec"]
    assert spec["quiet_hours"] == {"time_zone": "Europe/Paris", "start": "22:00", "end": "07:00"}
    assert spec["reminder"] == {"first_after": 900.0, "multiplier": 2.0, "max_count": 3}
    assert spec["escalation"] == [
        {"after": 1800.0, "channels": ["pagerduty"]},
        {"after": 5400.0, "channels": ["pagerduty", "email"]},
    ]
    # The same file in database mode is the same content: no new revision.
    local = json.loads(
        ok(await admin("--database-url", db_url, "policies", "put", "--file", str(policy))).out
    )
    assert (local["revision"], local["content_hash"]) == (put["revision"], put["content_hash"])
    # What `policies show` prints is a valid file again (durations in seconds).
    shown = tmp_path / "shown.json"
    shown.write_text(json.dumps({"notification_type": "ops.over_time", "spec": spec}))
    again = json.loads(
        ok(await remote(server, "oscar", "policies", "put", "--file", str(shown))).out
    )
    assert again["content_hash"] == put["content_hash"]

    policy.write_text(OVER_TIME_YAML.replace("require_ack: true", "require_ack: false"))
    result = await remote(server, "oscar", "policies", "put", "--file", str(policy))
    assert result.code == 2 and "spec.reminder" in result.err and "spec.escalation" in result.err
