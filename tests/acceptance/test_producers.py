"""The Go and Rust producers, built from the generated stubs, call a live server."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.support.builds import cached_binary
from tests.support.process import ServerProcess
from tests.toolchain.test_codegen import CARGO_TARGET_DIR
from tests.toolchain.tools import GO_CLIENT_DIR, RUST_CLIENT_DIR, find_tool, run, tool_env
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t

# The first Rust test of a machine builds the client from cold (minutes on two busy
# cores); later ones take the cached binary.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("quickstart"))
    try:
        server.wait_serving()
        yield server
    finally:
        server.stop()


def go_producer(tmp_path: Path) -> list[str]:
    """The Go producer, built once per change of its sources (tests/support/builds.py)."""
    go = find_tool("go")
    build = [go, "build", "-o", "{out}", "./cmd/uns-producer"]
    return [str(cached_binary("uns-producer-go", GO_CLIENT_DIR, go, build))]


def rust_producer(tmp_path: Path) -> list[str]:
    """The Rust producer, built once per change of its sources (tests/support/builds.py)."""
    cargo = find_tool("cargo")
    binary = cached_binary(
        "uns-producer-rust",
        RUST_CLIENT_DIR,
        cargo,
        [cargo, "build", "--locked", "--bin", "uns-producer"],
        built=Path(CARGO_TARGET_DIR) / "debug" / "uns-producer",
        env=tool_env({"CARGO_TARGET_DIR": CARGO_TARGET_DIR}),
        timeout=1800,
    )
    return [str(binary)]


@pytest.mark.parametrize(("lang", "build"), [("go", go_producer), ("rust", rust_producer)])
def test_producer_sends_and_reads_back(
    quickstart: ServerProcess, tmp_path: Path, lang: str, build: Callable[[Path], list[str]]
) -> None:
    command = build(tmp_path)
    key = (quickstart.cwd / "uns-dev-key.txt").read_text().strip()
    idem = f"{lang}-{uuid.uuid4()}"
    args = [
        *command,
        "--addr",
        quickstart.target,
        "--api-key",
        key,
        "--idempotency-key",
        idem,
        "--title",
        f"hello from {lang}",
    ]
    first = json.loads(run(args).stdout.strip().splitlines()[-1])
    again = json.loads(run(args).stdout.strip().splitlines()[-1])
    assert first["notification_id"] == again["notification_id"]
    assert first["idempotent_replay"] is False and again["idempotent_replay"] is True
    assert first["state"].startswith("NOTIFICATION_STATE_")

    with grpc.insecure_channel(quickstart.target) as channel:
        got = (
            pb_grpc.NotificationServiceStub(channel)
            .GetNotification(
                pb.GetNotificationRequest(notification_id=first["notification_id"]),
                metadata=(("authorization", f"Bearer {key}"),),
            )
            .notification
        )
    assert got.title == f"hello from {lang}"
    assert got.metadata["lang"] == lang
    assert got.state in (t.NOTIFICATION_STATE_PENDING, t.NOTIFICATION_STATE_DELIVERED)


def test_producer_reports_auth_errors(quickstart: ServerProcess, tmp_path: Path) -> None:
    command = go_producer(tmp_path)
    proc = subprocess.run(
        [*command, "--addr", quickstart.target, "--api-key", "uns_wrong"],
        capture_output=True,
        text=True,
        timeout=60,
        env=tool_env(),
    )
    assert proc.returncode == 2
    assert "Unauthenticated" in proc.stderr or "UNAUTHENTICATED" in proc.stderr


@pytest.mark.parametrize(("lang", "build"), [("go", go_producer), ("rust", rust_producer)])
def test_producer_waits_the_delay_a_rate_limited_answer_gives(
    tmp_path: Path, lang: str, build: Callable[[Path], list[str]]
) -> None:
    """One token every half second and a burst of one: the send takes it, the read-back
    is shed with RATE_LIMITED and a RetryInfo, and the producer retries it after at
    least that delay instead of failing."""
    command = build(tmp_path)
    server = ServerProcess(tmp_path, "--rate-limit-per-second", "2", "--rate-limit-burst", "1")
    try:
        server.wait_serving()
        key = (server.cwd / "uns-dev-key.txt").read_text().strip()
        proc = run([*command, "--addr", server.target, "--api-key", key])
    finally:
        server.stop()
    assert json.loads(proc.stdout.strip().splitlines()[-1])["notification_id"]
    waits = re.findall(r"RATE_LIMITED.*retrying in ([0-9.]+)(ms|s)", proc.stderr)
    assert waits, proc.stderr
    for amount, unit in waits:
        assert float(amount) / (1000 if unit == "ms" else 1) >= 0.5, proc.stderr


def test_go_over_time_example_plans_sends_and_withdraws(
    quickstart: ServerProcess, tmp_path: Path
) -> None:
    go = find_tool("go")
    build = [go, "build", "-o", "{out}", "./cmd/uns-over-time"]
    binary = cached_binary("uns-over-time", GO_CLIENT_DIR, go, build)
    key = (quickstart.cwd / "uns-dev-key.txt").read_text().strip()
    args = [str(binary), "--addr", quickstart.target, "--api-key", key, "--in", "2h"]
    plan, notification_id, state = run([*args, "--withdraw"]).stdout.strip().splitlines()
    assert plan == "DELIVERY 1 at +2h0m0s held=false"
    assert uuid.UUID(notification_id)
    assert state == "NOTIFICATION_STATE_WITHDRAWN"


@pytest.mark.parametrize(("lang", "build"), [("go", go_producer), ("rust", rust_producer)])
def test_producer_batch_mode_sends_one_batch_and_replays_it(
    quickstart: ServerProcess, tmp_path: Path, lang: str, build: Callable[[Path], list[str]]
) -> None:
    """--batch N: N notifications in one BatchSendNotifications call, one JSON line per
    item; the same run again replays every item. An item the server refuses (its key
    sent before with another payload) gets its code and reason on its line, the others
    are accepted."""
    command = build(tmp_path)
    key = (quickstart.cwd / "uns-dev-key.txt").read_text().strip()
    idem = f"{lang}-batch-{uuid.uuid4()}"
    args = [*command, "--addr", quickstart.target, "--api-key", key, "--idempotency-key", idem]
    first = [json.loads(line) for line in run([*args, "--batch", "3"]).stdout.splitlines()]
    again = [json.loads(line) for line in run([*args, "--batch", "3"]).stdout.splitlines()]
    assert [line["index"] for line in first] == [0, 1, 2]
    assert len({line["notification_id"] for line in first}) == 3
    assert not any(line["idempotent_replay"] for line in first)
    assert [line["notification_id"] for line in again] == [
        line["notification_id"] for line in first
    ]
    assert all(line["idempotent_replay"] for line in again)
    with grpc.insecure_channel(quickstart.target) as channel:
        got = (
            pb_grpc.NotificationServiceStub(channel)
            .GetNotification(
                pb.GetNotificationRequest(notification_id=first[2]["notification_id"]),
                metadata=(("authorization", f"Bearer {key}"),),
            )
            .notification
        )
    assert (got.idempotency_key, got.metadata["lang"]) == (f"{idem}-2", lang)

    # The first item replays; the conflicting payload (another title) refuses the others alone.
    proc = subprocess.run(
        [*args, "--batch", "4", "--title", "another title"],
        capture_output=True,
        text=True,
        timeout=120,
        env=tool_env(),
    )
    assert proc.returncode == 2, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2, 3]
    for line in lines[:3]:
        assert line["error"]["reason"] == "IDEMPOTENCY_CONFLICT", line
        assert line["error"]["code"] in ("AlreadyExists", "ALREADY_EXISTS")
    assert "error" not in lines[3] and lines[3]["idempotent_replay"] is False
