"""``uns-admin windows put|get|list|delete``: maintenance windows, in database mode and
in remote mode (``uns.v1.MaintenanceService``), on SQLite, as a real subprocess
with a real server on the same database. Both modes print the same JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.admin_cli import AdminCli, ok

WINDOW = (
    "--id",
    "db-upgrade",
    "--start",
    "2026-03-23T22:00:00+01:00",
    "--end",
    "2026-03-24T02:00:00+01:00",
    "--type",
    "db.*",
    "--type",
    "backup.failed",
    "--reason",
    "PostgreSQL 17 upgrade",
)
FILE = """\
- window_id: db-upgrade
  start_time: 2026-03-23T22:00:00+01:00
  end_time: 2026-03-24T04:00:00+01:00
  notification_types: ["db.*"]
- {window_id: quiet, start_time: "2026-04-01T00:00:00Z", end_time: "2026-04-02T00:00:00Z",
   notification_types: ["*"], reason: all of it}
"""


async def test_put_get_list_delete(uns_admin: AdminCli, tmp_path: Path) -> None:
    (put,) = json.loads(ok(await uns_admin("windows", "put", *WINDOW)).out)
    assert {k: v for k, v in put.items() if k not in ("update_time", "updated_by")} == {
        "window_id": "db-upgrade",
        "start_time": "2026-03-23T21:00:00Z",
        "end_time": "2026-03-24T01:00:00Z",
        "notification_types": ["db.*", "backup.failed"],
        "reason": "PostgreSQL 17 upgrade",
    }
    assert uns_admin.wrote(put["updated_by"]) and put["update_time"]
    # What one mode wrote, the other reads back alike.
    got = ok(await uns_admin.other()("windows", "get", "db-upgrade"))
    assert json.loads(got.out) == put

    windows = tmp_path / "windows.yaml"
    windows.write_text(FILE)
    ok(await uns_admin("windows", "put", "--file", str(windows)))
    listed = json.loads(ok(await uns_admin("windows", "list")).out)
    assert [(w["window_id"], w["end_time"], w["reason"]) for w in listed] == [
        ("db-upgrade", "2026-03-24T03:00:00Z", ""),
        ("quiet", "2026-04-02T00:00:00Z", "all of it"),
    ]
    assert ok(await uns_admin.other()("windows", "list")).out == json.dumps(listed, indent=2) + "\n"

    deleted = json.loads(ok(await uns_admin("windows", "delete", "quiet")).out)
    assert deleted["window_id"] == "quiet"
    for verb in ("get", "delete"):
        gone = await uns_admin("windows", verb, "quiet")
        assert gone.code == 1 and "no maintenance window quiet" in gone.err, gone
        assert gone.out == "" and "Traceback" not in gone.err


async def test_put_refuses_bad_windows(uns_admin: AdminCli, tmp_path: Path) -> None:
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text("window_id: x\nstart: 2026-03-23T22:00:00Z\n")
    start, end = "2026-03-23T22:00:00Z", "2026-03-23T23:00:00Z"
    for args, expected in (
        (("--id", "w", "--start", end, "--end", start, "--type", "a"), "window.end_time"),
        (("--id", "w", "--start", start, "--end", end, "--type", "a*b"), "notification_types[0]"),
        (("--id", "w", "--start", start, "--end", end), "window.notification_types"),
        (("--id", "w", "--start", "2026-03-23T22:00", "--end", end, "--type", "a"), "offset"),
        (("--id", "W!", "--start", start, "--end", end, "--type", "a"), "window.window_id"),
        (("--start", start, "--end", end, "--type", "a"), "--id"),
        (("--file", str(bad_file), "--id", "w"), "not both"),
        (("--file", str(bad_file)), "window.start"),
    ):
        result = await uns_admin("windows", "put", *args)
        assert result.code == 2 and result.out == "", (args, result)
        assert expected in result.err and "Traceback" not in result.err, (args, result)
    assert json.loads(ok(await uns_admin("windows", "list")).out) == []
