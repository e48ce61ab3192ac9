"""The ghz path and the webhook baseline at token size: real ghz against the real echo
server, the real POST loop against the real loopback receiver (no PostgreSQL, no
timings asserted); plus the report's ghz ratios on made-up rows."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from bench import ghz, phases, report
from bench.baselines.post_loop import post_loop
from bench.cpu import CpuMeter
from bench.harness import TYPE_ACCEPT, WEBHOOK_SECRET
from bench.receiver import WebhookReceiver
from bench.stats import Row
from bench.workloads.outside import _wait_listening
from tests.support.postgres import free_port
from tests.toolchain.tools import find_tool
from uns_server.observability.phases import PHASES


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.baselines.echo_server", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


async def test_ghz_drives_the_echo_server(echo_server: tuple[str, int], tmp_path: Path) -> None:
    exe = find_tool("ghz")
    target, pid = echo_server
    await _wait_listening(int(target.rsplit(":", 1)[1]))
    protoset = ghz.write_protoset(tmp_path / "uns.protoset")
    meter = CpuMeter(lambda: pid, None)
    meter.start()
    result = await ghz.run(
        exe, target, protoset, ghz.send_request(TYPE_ACCEPT, "smoke-"), concurrency=3, total=30
    )
    window = meter.stop()
    assert (result.ops, result.errors) == (30, 0), result.first_error
    assert len(result.latencies_ms) == 30 and min(result.latencies_ms) > 0
    assert result.cpu_s is not None and result.cpu_s > 0  # ghz's own CPU, from rusage
    assert window.server is not None  # the echo server's, from /proc


async def test_ghz_failures_are_counted_or_raised(tmp_path: Path) -> None:
    exe = find_tool("ghz")
    protoset = ghz.write_protoset(tmp_path / "uns.protoset")
    closed = f"127.0.0.1:{free_port()}"  # nothing listens: every call fails, ghz exits 0
    refused = await ghz.run(exe, closed, protoset, ghz.send_request(TYPE_ACCEPT, "x-"),
                            concurrency=1, total=2)  # fmt: skip
    assert (refused.ops, refused.errors) == (0, 2)
    assert "Unavailable" in refused.first_error
    # A schema ghz cannot use is no run at all: it exits non-zero, and the bench says why.
    (tmp_path / "empty.protoset").write_bytes(b"")
    with pytest.raises(RuntimeError, match="ghz exited"):
        await ghz.run(exe, closed, tmp_path / "empty.protoset", {}, concurrency=1, total=1)


def test_parse_counts_ok_calls_and_errors() -> None:
    parsed = ghz.parse(
        {
            "total": 2_000_000_000,
            "details": [
                {"latency": 1_500_000, "status": "OK", "error": ""},
                {"latency": 9_000_000, "status": "Unavailable", "error": "rpc error: down"},
                {"latency": 500_000, "status": "OK", "error": ""},
            ],
        }
    )
    assert (parsed.ops, parsed.errors, parsed.seconds) == (2, 1, 2.0)
    assert parsed.latencies_ms == [1.5, 0.5]
    assert parsed.first_error == "rpc error: down"


def test_protoset_lists_imports_before_the_service(tmp_path: Path) -> None:
    data = descriptor_pb2.FileDescriptorSet.FromString(
        ghz.write_protoset(tmp_path / "uns.protoset").read_bytes()
    )
    names = [f.name for f in data.file]
    assert names[-1] == "uns/v1/notification_service.proto"
    assert names.index("uns/v1/types.proto") < names.index("uns/v1/notification_service.proto")
    assert "google/protobuf/struct.proto" in names
    assert ghz.pinned_version().startswith("v")


async def test_post_loop_signs_what_the_receiver_verifies() -> None:
    receiver = WebhookReceiver(WEBHOOK_SECRET)
    await receiver.start()
    try:
        result = await post_loop(receiver.url(), WEBHOOK_SECRET, 2, 5.0, 12, "post-smoke-")
        arrived = await receiver.wait_for("post-smoke-", 12, 5.0)
    finally:
        await receiver.stop()
    assert (result["ops"], result["errors"], arrived) == (12, 0, 12), result["first_error"]
    assert receiver.bad_signatures == 0
    assert result["cpu_s"] > 0 and len(result["latencies_ms"]) == 12


def test_ghz_ratios_and_targets() -> None:
    def row(group: str, name: str, c: str, ops: int, cpu: float) -> Row:
        return Row(group, name, c, ops=ops, seconds=1.0, latencies_ms=[1.0], server_cpu_s=cpu)

    rows = [
        row("baseline", "ghz echo", "c=16", 1000, 0.4),  # 0.4 ms per call
        row("uns", "ghz accept", "c=16", 1000, 0.6),  # 1.5x
        row("uns", "ghz accept+log", "c=16", 500, 0.6),  # 1.2 ms: 3x
        row("uns", "ghz accept+webhook", "c=16", 500, 0.75),  # 1.5 ms
        row("baseline", "aiohttp POST", "c=16", 1000, 0.2),  # 0.2 ms: floor 0.6 -> 2.5x
    ]
    results = report.Results(rows)
    text = report.ratios(results)
    assert text["ghz accept c=16"] == "1.50x echo-cpu"
    assert text["ghz accept+webhook c=16"] == "3.75x echo-cpu 2.50x echo+post-cpu"
    met = {t.name: (t.value, t.met) for t in report.ghz_targets(results)}
    assert met["ghz c=16: srv CPU/accept, dispatch off / echo"] == (pytest.approx(1.5), True)
    assert met["ghz c=16: srv CPU/delivered (log) / echo"] == (pytest.approx(3.0), False)
    assert met["ghz c=1: srv CPU/delivered (log) / echo"] == (None, None)
    block = "\n".join(report.ghz_cpu(results))
    assert "0.400   0.600       1.200           1.500         0.200        1.50x     3.00x" in block
    assert "2.50x" in block
    assert report.ghz_targets(report.Results(rows[1:])) == []  # no echo row: no ghz targets


def test_phase_table_per_call() -> None:
    cpu = dict.fromkeys(PHASES, 0.0) | {"settle": 0.5, "accept (transaction)": 0.25}
    rows = [
        Row("uns", "ghz accept+log", "c=16", ops=500, seconds=1.0, server_cpu_s=0.8,
            extra={"phase_cpu_s": cpu}),
        Row("baseline", "ghz echo", "c=16", ops=500, seconds=1.0, server_cpu_s=0.2),
    ]  # fmt: skip
    lines = phases.table(rows)
    assert "accept+log c=16" in lines[2] and "echo" not in lines[2]  # rows without phases left out
    by_phase = {line.split("  ")[1].strip(): line.split()[-1] for line in lines[3:]}
    assert by_phase["settle"] == "1.000"  # 0.5 s over 500 calls
    assert by_phase["accept (transaction)"] == "0.500"
    assert by_phase["sum of phases"] == "1.500"
    assert by_phase["server CPU (/proc)"] == "1.600"
    assert phases.table(rows[1:]) == []
