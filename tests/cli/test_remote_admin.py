"""``uns-admin keys | policies | rotations`` in remote mode only (``--target``): what
the database mode has no counterpart for, on SQLite. The behaviour both modes
share is ``test_admin_modes.py``."""

from __future__ import annotations

from pathlib import Path

from tests.support.admin_cli import ok, remote, run_admin
from tests.support.server import KEYS, RunningServer

TYPE = "remote.alert"
POLICY_YAML = f"""\
notification_type: {TYPE}
spec:
  channels: [log]
  delivery_mode: GUARANTEED
"""


async def test_the_connection_options_also_go_after_the_command(server: RunningServer) -> None:
    listed = ok(
        await run_admin("keys", "list", "--target", server.target, "--api-key", KEYS["oscar"])
    )
    assert listed.out.split()[:2] == ["ID", "PREFIX"]


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
        ("rotations", "delete", "primary"),
        ("windows", "list"),
        ("windows", "delete", "db-upgrade"),
    ):
        result = await remote(server, "alice", *args)
        assert result.code == 1, (args, result)
        assert "PERMISSION_DENIED" in result.err and "operator role" in result.err, result
        assert "Traceback" not in result.err and result.out == ""
    listed = ok(await remote(server, "oscar", "keys", "list"))
    assert "mallory" not in listed.out
