"""``uns-admin keys | policies | recipients | rotations | oncall``: one suite, run in
database mode (``--database-url``) and in remote mode (``--target``, over
``uns.v1.KeyService``, ``PolicyService`` and ``RecipientService``), on SQLite,
as a real subprocess with a real server on the same database. Both modes behave alike
and print the same output; what only one mode has is in ``test_admin.py`` (database)
and ``test_remote_admin.py`` (remote)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from tests.support.admin_cli import AdminCli, ok
from tests.support.grpc_errors import rich_error
from tests.support.server import RunningServer, send_request
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.services.auth import hash_key

TYPE = "demo.alert"
POLICY_YAML = f"""\
notification_type: {TYPE}
spec:
  channels: [log]
  delivery_mode: GUARANTEED
  require_ack: true
  ack_timeout_minutes: 30
  priority: HIGH
  dedup_window_seconds: 300
  max_attempts: 5
"""

KEY_COLUMNS = ["ID", "PREFIX", "PRINCIPAL", "ROLES", "RESPONDS_FOR", "CREATED", "REVOKED"]


async def send_as(server: RunningServer, secret: str) -> pb.SendNotificationResponse:
    reply: pb.SendNotificationResponse = await server.stub(secret).SendNotification(send_request())
    return reply


async def test_created_key_works_until_revoked(uns_admin: AdminCli) -> None:
    server = uns_admin.server
    created = ok(
        await uns_admin(
            "keys",
            "create",
            "--principal",
            "carol",
            "--roles",
            "producer,responder",
            "--responds-for",
            "erin, dave,erin",
            "--description",
            "from ci",
        )
    )
    # The secret, once, and nothing else on stdout; the hint goes to stderr.
    assert created.out.count("\n") == 1
    secret = created.out.strip()
    assert secret.startswith("uns_") and len(secret) > 40
    assert "only once" in created.err and secret not in created.err
    assert "answering also for dave,erin" in created.err

    sent = await send_as(server, secret)
    got = await server.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=sent.notification_id)
    )
    assert got.notification.principal == "carol"

    listed = ok(await uns_admin("keys", "list"))
    for text in (listed.out, listed.err):
        assert secret not in text and hash_key(secret) not in text
    header, *rows = listed.out.splitlines()
    assert header.split() == KEY_COLUMNS
    (line,) = [row for row in rows if "carol" in row]
    key_id, prefix, principal, roles, responds_for, _created, revoked = line.split()
    assert secret.startswith(prefix) and len(prefix) < len(secret)
    assert (principal, roles, responds_for, revoked) == (
        "carol",
        "producer,responder",
        "dave,erin",
        "-",
    )
    assert ok(await uns_admin.other()("keys", "list")).out == listed.out

    revoked_run = ok(await uns_admin("keys", "revoke", prefix))
    assert key_id in revoked_run.err and secret not in revoked_run.err
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await send_as(server, secret)
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")

    relisted = ok(await uns_admin("keys", "list"))
    (line,) = [row for row in relisted.out.splitlines() if "carol" in row]
    assert line.split()[-1] != "-" and secret not in relisted.out  # revocation time

    again = await uns_admin("keys", "revoke", key_id)
    assert again.code == 1 and "no active key" in again.err, again


async def test_keys_create_refuses_bad_input(uns_admin: AdminCli) -> None:
    for args, expected in (
        (("--principal", "x", "--roles", "wizard"), "wizard"),
        (("--principal", "x", "--roles", ","), "--roles"),
        (("--principal", " ", "--roles", "producer"), "principal"),
        (("--roles", "producer"), "--principal"),
        (("--principal", "x", "--roles", "producer", "--responds-for", "y"), "responder"),
        (("--principal", "x" * 300, "--roles", "producer"), "principal"),
        (
            ("--principal", "x", "--roles", "responder", "--responds-for", "y" * 256),
            "responds_for[0]",
        ),
    ):
        result = await uns_admin("keys", "create", *args)
        assert result.code == 2 and result.out == "", (args, result)
        assert expected in result.err and "Traceback" not in result.err, (args, result)
    listed = ok(await uns_admin("keys", "list"))
    assert len(listed.out.splitlines()) == 1  # header only: nothing was created


async def simulated(server: RunningServer) -> t.EffectivePolicy:
    sim = await server.stub("alice").Simulate(pb.SimulateRequest(request=send_request()))
    effective: t.EffectivePolicy = sim.effective_policy
    return effective


async def test_policies_put_show_list_activate(uns_admin: AdminCli, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_YAML)
    first = json.loads(ok(await uns_admin("policies", "put", "--file", str(policy))).out)
    assert (first["notification_type"], first["revision"], first["state"]) == (
        TYPE,
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
    assert uns_admin.wrote(first["created_by"]), first

    no_active = await uns_admin("policies", "show", TYPE)
    assert no_active.code == 1 and "no ACTIVE policy" in no_active.err, no_active
    shown = ok(await uns_admin("policies", "show", TYPE, "--revision", "1"))
    assert json.loads(shown.out) == first
    assert ok(await uns_admin.other()("policies", "show", TYPE, "--revision", "1")).out == shown.out

    activated = json.loads(ok(await uns_admin("policies", "activate", TYPE, "1")).out)
    assert activated["state"] == "ACTIVE" and activated["activate_time"]
    shown = ok(await uns_admin("policies", "show", TYPE))
    assert json.loads(shown.out)["revision"] == 1 and json.loads(shown.out)["state"] == "ACTIVE"
    effective = await simulated(uns_admin.server)
    assert (effective.policy_id, effective.policy_revision, effective.policy_hash) == (
        first["policy_id"],
        1,
        first["content_hash"],
    )
    assert list(effective.channels) == ["log"] and effective.max_attempts == 5

    # Identical content: same revision. A JSON list: several types.
    again = json.loads(ok(await uns_admin("policies", "put", "--file", str(policy))).out)
    assert again["revision"] == 1
    many = tmp_path / "policies.json"
    many.write_text(
        json.dumps(
            [
                {
                    "notification_type": TYPE,
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
        ok(await uns_admin("policies", "put", "--file", str(many), "--activate")).out
    )
    assert [(w["notification_type"], w["revision"], w["state"]) for w in written] == [
        (TYPE, 2, "ACTIVE"),
        ("other.type", 1, "ACTIVE"),
    ]
    assert written[0]["spec"]["max_attempts"] == 5  # defaults filled in

    listed = ok(await uns_admin("policies", "list", TYPE))
    assert [(r["revision"], r["state"]) for r in json.loads(listed.out)] == [
        (2, "ACTIVE"),
        (1, "INACTIVE"),
    ]
    assert ok(await uns_admin.other()("policies", "list", TYPE)).out == listed.out
    assert json.loads(ok(await uns_admin("policies", "list", "no.such")).out) == []
    # Without a type: every type's revisions, types in name order (on the database; the
    # API lists one type at a time).
    every = await uns_admin("policies", "list")
    if uns_admin.mode == "database":
        assert [(r["notification_type"], r["revision"]) for r in json.loads(ok(every).out)] == [
            (TYPE, 2),  # demo.alert
            (TYPE, 1),
            ("other.type", 1),
        ]
    else:
        assert every.code == 2 and "--database-url" in every.err, every

    missing = await uns_admin("policies", "activate", TYPE, "9")
    assert missing.code == 1 and "no revision 9" in missing.err, missing

    # The server resolves with what uns-admin wrote.
    effective = await simulated(uns_admin.server)
    assert effective.policy_revision == 2
    assert effective.priority == t.PRIORITY_LOW
    sim = await uns_admin.server.stub("alice").Simulate(pb.SimulateRequest(request=send_request()))
    assert sim.delivery_mode == t.DELIVERY_MODE_BEST_EFFORT


async def test_policies_put_refuses_invalid_files(uns_admin: AdminCli, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    for content, expected in (
        (f"notification_type: {TYPE}\nspec: {{channels: [log]}}\n", "spec.delivery_mode"),
        (
            f"notification_type: {TYPE}\n"
            "spec: {channels: [log], delivery_mode: FAST, max_attempts: 500}\n",
            "spec.max_attempts",
        ),
        (
            "- notification_type: bad type\n  spec: {channels: [log], delivery_mode: GUARANTEED}\n",
            "[0].notification_type",
        ),
        ("{not: [valid", "not valid YAML"),
        ("[]", "no policy"),
    ):
        policy.write_text(content)
        result = await uns_admin("policies", "put", "--file", str(policy), "--activate")
        assert result.code == 2 and result.out == "", (content, result)
        assert expected in result.err, (content, result)
        assert len(result.messages) == 1 and "Traceback" not in result.err, (content, result)
    assert json.loads(ok(await uns_admin("policies", "list", TYPE)).out) == []


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


async def test_policies_with_time_blocks_put_from_yaml(uns_admin: AdminCli, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(OVER_TIME_YAML)
    put = json.loads(ok(await uns_admin("policies", "put", "--file", str(policy))).out)
    spec = put["spec"]
    assert spec["quiet_hours"] == {"time_zone": "Europe/Paris", "start": "22:00", "end": "07:00"}
    assert spec["reminder"] == {"first_after": 900.0, "multiplier": 2.0, "max_count": 3}
    assert spec["escalation"] == [
        {"after": 1800.0, "channels": ["pagerduty"]},
        {"after": 5400.0, "channels": ["pagerduty", "email"]},
    ]
    # The same file in the other mode is the same content: no new revision.
    there = ok(await uns_admin.other()("policies", "put", "--file", str(policy)))
    assert (json.loads(there.out)["revision"], json.loads(there.out)["content_hash"]) == (
        put["revision"],
        put["content_hash"],
    )
    # What `policies show` prints is a valid file again (durations in seconds).
    shown = tmp_path / "shown.json"
    shown.write_text(json.dumps({"notification_type": "ops.over_time", "spec": spec}))
    again = json.loads(ok(await uns_admin("policies", "put", "--file", str(shown))).out)
    assert again["content_hash"] == put["content_hash"]

    policy.write_text(OVER_TIME_YAML.replace("require_ack: true", "require_ack: false"))
    result = await uns_admin("policies", "put", "--file", str(policy))
    assert result.code == 2 and "spec.reminder" in result.err and "spec.escalation" in result.err


PEOPLE_YAML = """\
- recipient_id: alice
  display_name: Alice Martin
  time_zone: Europe/Paris
  contacts: [{channel: log, address: alice}]
  quiet_hours: {time_zone: Europe/Paris, start: "22:00", end: "07:00"}
- recipient_id: bob
  display_name: Bob
  time_zone: America/New_York
"""

ROTATION_YAML = """\
rotation_id: primary
members: [alice, bob]
start_time: 2026-03-23T10:00:00+01:00
shift: 7d
time_zone: Europe/Paris
overrides:
  - {recipient_id: bob, start_time: 2026-03-24T10:00:00+01:00,
     end_time: 2026-03-25T10:00:00+01:00}
"""


async def test_people_and_rotations(uns_admin: AdminCli, tmp_path: Path) -> None:
    people = tmp_path / "people.yaml"
    people.write_text(PEOPLE_YAML)
    rotation = tmp_path / "rotation.yaml"
    rotation.write_text(ROTATION_YAML)

    put = json.loads(ok(await uns_admin("recipients", "put", "--file", str(people))).out)
    assert [p["recipient_id"] for p in put] == ["alice", "bob"]
    assert uns_admin.wrote(put[0]["updated_by"]), put
    put_rot = json.loads(ok(await uns_admin("rotations", "put", "--file", str(rotation))).out)
    assert put_rot[0]["shift"] == "7d" and uns_admin.wrote(put_rot[0]["updated_by"])

    for noun in ("recipients", "rotations"):  # an operator reads the same in both modes
        here = ok(await uns_admin(noun, "list")).out
        assert here == ok(await uns_admin.other()(noun, "list")).out
    shown = json.loads(ok(await uns_admin("recipients", "show", "alice")).out)
    assert shown["quiet_hours"] == {"time_zone": "Europe/Paris", "start": "22:00", "end": "07:00"}
    if uns_admin.mode == "remote":
        # Producers and responders read people without their contacts and quiet hours
        # (personal data), and rotations whole.
        for who in ("alice", "rita"):
            listed = json.loads(ok(await uns_admin("recipients", "list", who=who)).out)
            assert [p["recipient_id"] for p in listed] == ["alice", "bob"]
            assert all(not p.get("contacts") and not p.get("quiet_hours") for p in listed)
            rotations = ok(await uns_admin("rotations", "list", who=who)).out
            assert rotations == ok(await uns_admin.other()("rotations", "list")).out

    at = ("--at", "2026-03-24T12:00:00+01:00")
    here = json.loads(ok(await uns_admin("oncall", "primary", *at, who="alice")).out)
    assert here == json.loads(ok(await uns_admin.other()("oncall", "primary", *at)).out)
    assert (here["recipient_id"], here["override"], here["next_recipient_id"]) == (
        "bob",
        True,
        "alice",
    )
    assert here["shift_end_time"] == "2026-03-25T09:00:00Z"

    # Still in a rotation: refused, exit 1, naming the rotation.
    refused = await uns_admin("recipients", "delete", "bob")
    assert refused.code == 1 and "primary" in refused.err, refused
    ok(await uns_admin("rotations", "delete", "primary"))
    gone = json.loads(ok(await uns_admin("recipients", "delete", "bob")).out)
    assert gone["recipient_id"] == "bob"
    missing = await uns_admin("rotations", "show", "primary")
    assert missing.code == 1 and "no rotation primary" in missing.err, missing

    bad = tmp_path / "bad.yaml"
    bad.write_text("rotation_id: x\nmembers: []\nshift: soon\ntime_zone: UTC\n")
    invalid = await uns_admin("rotations", "put", "--file", str(bad))
    assert invalid.code == 2 and "shift" in invalid.err, invalid
