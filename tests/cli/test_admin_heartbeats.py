"""``uns-admin heartbeats put|list|show|delete`` in database mode and remote mode (over
``uns.v1.HeartbeatService``), on SQLite, as a real subprocess with a real server
on the same database: from a file and from flags, the same output in both modes, and
what was put arms the deadline the server's worker pages from."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.admin_cli import AdminCli, ok

FILE = """\
- heartbeat_id: nightly-backup
  notification_type: demo.alert
  interval: 1d
  grace: 30m
  title: The nightly backup did not run
  message: No beat from backup.sh on db-1 within a day and half an hour.
- heartbeat_id: hourly-sync
  notification_type: demo.alert
  interval: 3600
  title: The hourly sync is late
  message: No beat from sync.sh.
"""


async def test_heartbeats_put_list_show_delete(uns_admin: AdminCli, tmp_path: Path) -> None:
    path = tmp_path / "heartbeats.yaml"
    path.write_text(FILE)
    put = json.loads(ok(await uns_admin("heartbeats", "put", "--file", str(path))).out)
    assert [h["heartbeat_id"] for h in put] == ["nightly-backup", "hourly-sync"]
    backup = put[0]
    assert (backup["interval"], backup["grace"], backup["state"]) == (
        "86400s",
        "1800s",
        "HEARTBEAT_STATE_UP",
    )
    assert uns_admin.wrote(backup["updated_by"]) and "deadline_time" in backup
    flags = await uns_admin(
        "heartbeats",
        "put",
        "weekly-report",
        "--type",
        "demo.alert",
        "--interval",
        "7d",
        "--title",
        "No weekly report",
        "--message",
        "report.sh did not run this week",
    )
    assert json.loads(ok(flags).out)[0]["interval"] == "604800s"
    listed = json.loads(ok(await uns_admin("heartbeats", "list")).out)
    assert [h["heartbeat_id"] for h in listed] == ["hourly-sync", "nightly-backup", "weekly-report"]
    # Both modes print the same object; a printed one can be put back as it is.
    shown = ok(await uns_admin("heartbeats", "show", "nightly-backup")).out
    assert json.loads(shown) == json.loads(
        ok(await uns_admin.other()("heartbeats", "show", "nightly-backup")).out
    )
    path.write_text(shown)
    again = json.loads(ok(await uns_admin("heartbeats", "put", "--file", str(path))).out)
    assert again[0]["deadline_time"] == backup["deadline_time"]  # same timing: same deadline
    # The server pages from what either mode armed.
    app = uns_admin.server.app
    assert (await app.timers.run_once()).paged == 0
    gone = json.loads(ok(await uns_admin("heartbeats", "delete", "hourly-sync")).out)
    assert gone["heartbeat_id"] == "hourly-sync"
    missing = await uns_admin("heartbeats", "show", "hourly-sync")
    assert missing.code == 1 and "no heartbeat hourly-sync" in missing.err
    bad = await uns_admin("heartbeats", "put", "Bad Id", "--interval", "soon")
    assert bad.code == 2 and "heartbeat" in bad.err
