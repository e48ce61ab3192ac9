"""``uns-producer beat`` (the Go producer, for cron) against a live server: the beat
moves the heartbeat's deadline; an unknown heartbeat or a bad key exits 2 with the
code and reason on stderr (issue 44 item 5)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from tests.acceptance.test_producers import go_producer
from tests.support.process import ServerProcess
from tests.toolchain.tools import run, tool_env
from uns.v1 import heartbeat_service_pb2 as hpb
from uns.v1 import heartbeat_service_pb2_grpc as hpb_grpc

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def quickstart(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path)
    try:
        server.wait_serving()
        yield server
    finally:
        server.stop()


def test_go_producer_beats(quickstart: ServerProcess, tmp_path: Path) -> None:
    command = go_producer(tmp_path)
    key = (quickstart.cwd / "uns-dev-key.txt").read_text().strip()
    heartbeat = hpb.HeartbeatMonitor(
        heartbeat_id="nightly-backup",
        notification_type="demo.alert",
        title="The nightly backup did not run",
        message="No beat from backup.sh",
    )
    heartbeat.interval.FromTimedelta(timedelta(days=1))
    with grpc.insecure_channel(quickstart.target) as channel:
        hpb_grpc.HeartbeatServiceStub(channel).PutHeartbeat(
            hpb.PutHeartbeatRequest(heartbeat=heartbeat),
            metadata=(("authorization", f"Bearer {key}"),),
        )
    base = [*command, "beat", "--addr", quickstart.target, "--api-key", key]
    line = json.loads(run([*base, "nightly-backup"]).stdout.strip().splitlines()[-1])
    assert (line["heartbeat_id"], line["state"]) == ("nightly-backup", "HEARTBEAT_STATE_UP")
    assert line["deadline_time"] > line["last_beat_time"]
    for args, reason in (
        ([*base, "weekly-report"], "NOT_FOUND"),
        ([*command, "beat", "--addr", quickstart.target, "--api-key", "uns_wrong", "x"], "UNAUTH"),
    ):
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60, env=tool_env())
        assert proc.returncode == 2, proc
        assert reason in proc.stderr.upper(), proc.stderr
    usage = subprocess.run(
        [*command, "beat"], capture_output=True, text=True, timeout=60, env=tool_env()
    )
    assert usage.returncode == 2 and "HEARTBEAT_ID" in usage.stderr
