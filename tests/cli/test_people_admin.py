"""``uns-admin recipients|rotations|oncall`` from YAML files, on the database and with
``--target`` (over ``uns.v1.RecipientService``), on both dialects: the two modes give
the same output."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_remote_admin import admin, ok, remote
from tests.support.server import RunningServer

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


async def test_people_and_rotations_in_both_modes(
    server: RunningServer, db_url: str, tmp_path: Path
) -> None:
    people = tmp_path / "people.yaml"
    people.write_text(PEOPLE_YAML)
    rotation = tmp_path / "rotation.yaml"
    rotation.write_text(ROTATION_YAML)
    local = ("--database-url", db_url)

    put = json.loads(ok(await admin(*local, "recipients", "put", "--file", str(people))).out)
    assert [p["recipient_id"] for p in put] == ["alice", "bob"]
    assert put[0]["updated_by"].startswith("uns-admin:")
    put_rot = json.loads(
        ok(await remote(server, "oscar", "rotations", "put", "--file", str(rotation))).out
    )
    assert (put_rot[0]["shift_seconds"], put_rot[0]["updated_by"]) == (7 * 86400, "oscar")

    for noun in ("recipients", "rotations"):
        here = ok(await admin(*local, noun, "list")).out
        there = ok(await remote(server, "alice", noun, "list")).out  # producers read
        assert here == there
    shown = json.loads(ok(await remote(server, "rita", "recipients", "show", "alice")).out)
    assert shown["quiet_hours"] == {"time_zone": "Europe/Paris", "start": "22:00", "end": "07:00"}

    at = ("--at", "2026-03-24T12:00:00+01:00")
    here = json.loads(ok(await admin(*local, "oncall", "primary", *at)).out)
    there = json.loads(ok(await remote(server, "alice", "oncall", "primary", *at)).out)
    assert here == there
    assert (here["recipient_id"], here["override"], here["next_recipient_id"]) == (
        "bob",
        True,
        "alice",
    )
    assert here["shift_end_time"] == "2026-03-25T09:00:00Z"

    # Still in a rotation: refused in both modes, exit 1, naming the rotation.
    for result in (
        await admin(*local, "recipients", "delete", "bob"),
        await remote(server, "oscar", "recipients", "delete", "bob"),
    ):
        assert result.code == 1 and "primary" in result.err, result
    refused = await remote(server, "alice", "rotations", "delete", "primary")
    assert refused.code == 1 and "operator" in refused.err, refused
    ok(await remote(server, "oscar", "rotations", "delete", "primary"))
    gone = json.loads(ok(await admin(*local, "recipients", "delete", "bob")).out)
    assert gone["recipient_id"] == "bob"
    missing = await admin(*local, "rotations", "show", "primary")
    assert missing.code == 1 and "no rotation primary" in missing.err

    bad = tmp_path / "bad.yaml"
    bad.write_text("rotation_id: x\nmembers: []\nshift: soon\ntime_zone: UTC\n")
    invalid = await admin(*local, "rotations", "put", "--file", str(bad))
    assert invalid.code == 2 and "shift" in invalid.err, invalid
