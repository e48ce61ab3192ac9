"""``uns-producer --wait-ack`` (Go and Rust) against live servers, and the producer guide.

The producers wait for the terminal ack event over WatchEvents: while connected, across a
server restart (they reconnect and resume by themselves), and across their own restart
(``--cursor-file`` + ``--notification-id``). docs/producers.md is checked here too: its Go,
Rust and Python snippets must be excerpts of the real programs, and its grpcurl block runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from tests.acceptance.test_producers import CARGO_TARGET_DIR, go_producer, rust_producer
from tests.support.docs import marked_block
from tests.support.process import ServerProcess
from tests.toolchain.tools import REPO_ROOT, find_tool, tool_env
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t

DEADLINE_SECONDS = 60.0
GUIDE = REPO_ROOT / "docs" / "producers.md"

# A cold machine's first Rust build may fall to a test of this module (minutes).
pytestmark = pytest.mark.timeout(1800)
LANGS = pytest.mark.parametrize(("lang", "build"), [("go", go_producer), ("rust", rust_producer)])
Build = Callable[[Path], list[str]]
T = TypeVar("T")


class PinnedServer(ServerProcess):
    """A ``ServerProcess`` on a given port: a restarted server that clients find again.

    ``ServerProcess`` picks a free port and passes ``--listen`` itself; the later
    ``--listen`` given here wins.
    """

    def __init__(self, cwd: Path, port: int) -> None:
        super().__init__(cwd, "--listen", f"127.0.0.1:{port}")
        self.port = port
        self.target = f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("wait-ack"))
    try:
        proc.wait_serving()
        yield proc
    finally:
        proc.stop()


def dev_key(server: ServerProcess) -> str:
    return (server.cwd / "uns-dev-key.txt").read_text().strip()


def poll(what: str, probe: Callable[[], T | None], timeout: float = DEADLINE_SECONDS) -> T:
    """``probe()``'s first non-None result; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


class Producer:
    """``uns-producer`` running in the background, its output in files."""

    def __init__(
        self,
        command: list[str],
        workdir: Path,
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = f"producer-{time.monotonic_ns()}"
        self.stdout_path = workdir / f"{self.name}.out"
        self.stderr_path = workdir / f"{self.name}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [*command, *args],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=tool_env(env or {}),
            )

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_for(self, pattern: str, count: int = 1) -> list[re.Match[str]]:
        """The first ``count`` matches of ``pattern`` on stderr, once they are there."""

        def probe() -> list[re.Match[str]] | None:
            found = list(re.finditer(pattern, self.stderr()))
            if len(found) >= count:
                return found[:count]
            if self.proc.poll() is not None:
                pytest.fail(
                    f"uns-producer exited {self.proc.returncode} before {pattern!r}:\n"
                    f"{self.stdout()}\n{self.stderr()}"
                )
            return None

        return poll(f"{pattern!r} x{count} from uns-producer", probe)

    def notification_id(self) -> str:
        return self.wait_for(r"sent ([0-9a-f-]{36})")[0].group(1)

    def result(self) -> tuple[int, dict[str, Any]]:
        """Exit code and the one JSON line it printed."""
        try:
            code = self.proc.wait(DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"uns-producer did not exit:\n{self.stderr()}")
        lines = self.stdout().splitlines()
        assert len(lines) == 1, f"expected one line, got {lines!r}\n{self.stderr()}"
        return code, json.loads(lines[0])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def stub(channel: grpc.Channel) -> pb_grpc.NotificationServiceStub:
    return pb_grpc.NotificationServiceStub(channel)


def auth(key: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {key}"),)


def get(target: str, key: str, notification_id: str) -> t.Notification:
    with grpc.insecure_channel(target) as channel:
        request = pb.GetNotificationRequest(notification_id=notification_id)
        return stub(channel).GetNotification(request, metadata=auth(key), timeout=10).notification


def wait_delivered(target: str, key: str, notification_id: str) -> t.Notification:
    def probe() -> t.Notification | None:
        n = get(target, key, notification_id)
        return n if n.ack_state == t.ACK_STATE_PENDING else None

    notification = poll(f"{notification_id} DELIVERED with a pending ack", probe)
    assert notification.state == t.NOTIFICATION_STATE_DELIVERED
    assert notification.effective_policy.require_ack  # --wait-ack sent require_ack
    return notification


def acknowledge(target: str, key: str, notification_id: str) -> t.Notification:
    """Acknowledge as a responder (the dev key has every role)."""
    with grpc.insecure_channel(target) as channel:
        request = pb.AcknowledgeRequest(notification_id=notification_id)
        return stub(channel).Acknowledge(request, metadata=auth(key), timeout=10).notification


def acked_event(target: str, key: str, notification_id: str) -> t.Event:
    """The notification's ACKED event, read back from the server's history."""
    request = pb.WatchEventsRequest(
        notification_ids=[notification_id], kinds=[t.EVENT_KIND_ACKED], replay_history=True
    )
    with grpc.insecure_channel(target) as channel:
        call = stub(channel).WatchEvents(request, metadata=auth(key), timeout=30)
        try:
            for response in call:
                if response.WhichOneof("response") == "event":
                    return response.event
        finally:
            call.cancel()
    raise AssertionError("the ACKED event stream ended")


def expected_ack(target: str, key: str, notification_id: str, actor: str) -> dict[str, Any]:
    event = acked_event(target, key, notification_id)
    return {"kind": "EVENT_KIND_ACKED", "actor": actor, "sequence": event.sequence}


def producer_args(server: ServerProcess, key: str, *args: str) -> list[str]:
    return ["--addr", server.target, "--api-key", key, *args]


WATCHING = r"watching \S+ after sequence (\d+)"


@LANGS
def test_wait_ack_reports_the_acknowledgement(
    server: ServerProcess, tmp_path: Path, lang: str, build: Build
) -> None:
    key = dev_key(server)
    producer = Producer(
        build(tmp_path), tmp_path, *producer_args(server, key, "--wait-ack", "--title", lang)
    )
    try:
        nid = producer.notification_id()
        wait_delivered(server.target, key, nid)
        producer.wait_for(WATCHING)  # the ack arrives live, on the open stream
        acked = acknowledge(server.target, key, nid)
        code, line = producer.result()
    finally:
        producer.kill()
    assert code == 0, producer.stderr()
    assert line["notification_id"] == nid
    assert line["state"] == "NOTIFICATION_STATE_DELIVERED"
    assert line["idempotent_replay"] is False
    assert line["ack"] == expected_ack(server.target, key, nid, acked.ack_actor)


@LANGS
def test_wait_ack_times_out_with_exit_3(
    server: ServerProcess, tmp_path: Path, lang: str, build: Build
) -> None:
    key = dev_key(server)
    args = producer_args(server, key, "--wait-ack", "--wait-timeout", "1500ms")
    proc = subprocess.run(
        [*build(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
        env=tool_env(),
    )
    assert proc.returncode == 3, proc.stderr
    line = json.loads(proc.stdout)
    assert "ack" not in line
    assert f"--notification-id {line['notification_id']}" in proc.stderr


@LANGS
def test_wait_ack_resumes_after_a_server_restart(tmp_path: Path, lang: str, build: Build) -> None:
    command = build(tmp_path)
    workdir = tmp_path / "server"
    workdir.mkdir()
    first = ServerProcess(workdir)
    servers = [first]
    producer: Producer | None = None
    try:
        first.wait_serving()
        key = dev_key(first)
        producer = Producer(command, tmp_path, *producer_args(first, key, "--wait-ack"))
        nid = producer.notification_id()
        wait_delivered(first.target, key, nid)
        producer.wait_for(WATCHING)

        # SIGTERM: open streams end with UNAVAILABLE (SHUTTING_DOWN). The same port and
        # the same SQLite file come back in a new process.
        assert first.stop() == 0, first.output()
        streams_so_far = len(re.findall(WATCHING, producer.stderr()))
        second = PinnedServer(workdir, first.port)
        servers.append(second)
        second.wait_serving()
        # The producer found the new server by itself and resumed its cursor.
        producer.wait_for(WATCHING, count=streams_so_far + 1)
        acked = acknowledge(second.target, key, nid)
        code, line = producer.result()
        assert code == 0, producer.stderr()
        assert line["notification_id"] == nid
        assert line["ack"] == expected_ack(second.target, key, nid, acked.ack_actor)
        assert "watch interrupted" in producer.stderr()
    finally:
        if producer is not None:
            producer.kill()
        for proc in servers:
            proc.stop()


@LANGS
def test_wait_ack_resumes_from_the_cursor_file(
    server: ServerProcess, tmp_path: Path, lang: str, build: Build
) -> None:
    command = build(tmp_path)
    key = dev_key(server)
    cursor_file = tmp_path / "ack.cursor"
    idem = f"{lang}-cursor-{time.time_ns()}"
    waiting = ["--wait-ack", "--idempotency-key", idem, "--cursor-file", str(cursor_file)]
    first = Producer(command, tmp_path, *producer_args(server, key, *waiting))
    try:
        nid = first.notification_id()
        wait_delivered(server.target, key, nid)
        first.wait_for(WATCHING)
        poll("the cursor file", lambda: True if cursor_file.exists() else None)
    finally:
        first.kill()  # SIGKILL, before the ack
    position = int(cursor_file.read_text())

    acked = acknowledge(server.target, key, nid)  # committed while no producer runs
    ack = expected_ack(server.target, key, nid, acked.ack_actor)
    assert ack["sequence"] > position

    resumed = Producer(
        command,
        tmp_path,
        *producer_args(server, key, "--notification-id", nid, "--cursor-file", str(cursor_file)),
    )
    try:
        code, line = resumed.result()
    finally:
        resumed.kill()
    assert code == 0, resumed.stderr()
    assert line["notification_id"] == nid and line["ack"] == ack
    assert f"after sequence {position}\n" in resumed.stderr()  # started from the file
    assert "sent " not in resumed.stderr()  # and sent nothing

    # A producer restarted with its idempotency key and cursor file gets the same answer.
    again = Producer(command, tmp_path, *producer_args(server, key, *waiting))
    try:
        code, line = again.result()
    finally:
        again.kill()
    assert code == 0, again.stderr()
    assert line["notification_id"] == nid and line["idempotent_replay"] is True
    assert line["ack"] == ack


# --- docs/producers.md -------------------------------------------------------------------

SNIPPET = re.compile(r"<!-- snippet: (?P<path>\S+) -->\s*```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)
CODE_BLOCK = re.compile(r"^```(go|rust|python)$", re.M)


def code_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack)))


def test_guide_snippets_are_excerpts_of_the_real_code() -> None:
    text = GUIDE.read_text()
    snippets = list(SNIPPET.finditer(text))
    assert len(snippets) == len(CODE_BLOCK.findall(text)), "every code block names its source"
    sources = {m["path"] for m in snippets}
    assert sources >= {
        "clients/python/examples/producer.py",
        "clients/go/cmd/uns-producer/main.go",
        "clients/go/cmd/uns-producer/wait.go",
        "clients/rust/src/bin/uns-producer.rs",
    }
    for snippet in snippets:
        source = code_lines((REPO_ROOT / snippet["path"]).read_text())
        assert contains(source, code_lines(snippet["code"])), (
            f"docs/producers.md: this snippet is not in {snippet['path']}:\n{snippet['code']}"
        )


def test_readme_links_the_guide() -> None:
    assert "(docs/producers.md)" in (REPO_ROOT / "README.md").read_text()


def test_guide_grpcurl_block_runs(server: ServerProcess, tmp_path: Path) -> None:
    grpcurl = find_tool("grpcurl")
    (tmp_path / "uns-dev-key.txt").write_text(dev_key(server))
    kept = tmp_path / "out"  # the block's $OUT
    kept.mkdir()
    env = {
        **os.environ,
        "ADDR": server.target,
        "OUT": str(kept),
        "PATH": f"{Path(grpcurl).parent}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block("docs/producers.md", "producers-grpcurl")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert '"idempotentReplay": true' in out  # the retry returned the original
    assert "IDEMPOTENCY_CONFLICT" in out  # a changed payload under the same key
    assert '"kind": "EVENT_KIND_ACKED"' in out  # the watch saw the terminal ack event
    assert {p.name for p in tmp_path.iterdir()} == {"uns-dev-key.txt", "out"}  # all in $OUT
    cursor = int((kept / "cursor.txt").read_text())
    nid = json.loads((kept / "sent.json").read_text())["notificationId"]
    # The batch: step 2's send replayed, a new one, an invalid one refused alone.
    replayed, new, invalid = json.loads((kept / "batch.json").read_text())["results"]
    assert replayed["response"]["notificationId"] == nid
    assert replayed["response"]["idempotentReplay"] is True
    assert new["response"]["notificationId"] not in ("", nid)
    assert invalid["error"]["code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert invalid["error"]["details"][0]["reason"] == "INVALID_REQUEST"
    assert cursor >= acked_event(server.target, dev_key(server), nid).sequence


@pytest.mark.parametrize("lang", ["go", "rust"])
def test_guide_producer_blocks_run_from_the_repository_root(tmp_path: Path, lang: str) -> None:
    """The guide's build-and-run block, verbatim, in a directory laid out like the
    repository root (``clients/`` linked in) where the quickstart wrote its dev key."""
    find_tool("go" if lang == "go" else "cargo")
    block = marked_block("docs/producers.md", f"producer-{lang}")
    server = ServerProcess(tmp_path)
    try:
        server.wait_serving()
        (tmp_path / "clients").symlink_to(REPO_ROOT / "clients")
        env = {"ADDR": server.target, "CARGO_TARGET_DIR": CARGO_TARGET_DIR}
        producer = Producer(
            ["bash", "-euo", "pipefail", "-c", block], tmp_path, cwd=tmp_path, env=env
        )
        try:
            nid = producer.notification_id()
            wait_delivered(server.target, dev_key(server), nid)
            producer.wait_for(WATCHING)
            acknowledge(server.target, dev_key(server), nid)
            code, line = producer.result()
        finally:
            producer.kill()
    finally:
        server.stop()
    assert code == 0, producer.stderr()
    assert line["notification_id"] == nid
    assert line["ack"]["kind"] == "EVENT_KIND_ACKED"
    assert (tmp_path / "backup-db1.cursor").is_file()
