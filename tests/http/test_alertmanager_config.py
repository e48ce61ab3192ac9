"""docs/deployment.md's ``alertmanager.yml`` receiver works with UNS: what it makes
Alertmanager send (the URL with its ``?type=``, ``Authorization: Bearer`` with the
credentials) is accepted, and a real Alertmanager configured with it pages through UNS
and withdraws the page when the alert resolves.

The second test runs Debian's ``prometheus-alertmanager`` (or an ``alertmanager`` built
from github.com/prometheus/alertmanager) on loopback: it skips without the binary unless
``UNS_REQUIRE_TOOLCHAINS=1``, where it fails. Transport only: SQLite (the intake and the
withdrawal behind it run on both dialects in tests/http/test_alertmanager.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.http.alertmanager_payloads import probe_failure, webhook
from tests.http.test_json_over_http import _start
from tests.support.docs import marked_block
from tests.support.postgres import free_port
from tests.support.server import KEYS, RunningServer
from tests.support.watching import events_until
from tests.toolchain.tools import search_path, skip_or_fail
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

# Generous: two cores shared with other suites. Each is a deadline, not a pause.
START_TIMEOUT_SECONDS = 60.0
NOTIFY_TIMEOUT_SECONDS = 60.0


def documented() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        marked_block("docs/deployment.md", "alertmanager-yml", "yaml")
    )
    return config


def webhook_config(config: dict[str, Any]) -> dict[str, Any]:
    (receiver,) = config["receivers"]
    assert config["route"]["receiver"] == receiver["name"]
    (hook,) = receiver["webhook_configs"]
    found: dict[str, Any] = hook
    return found


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await _start(tmp_path, dispatch_enabled=False)
    try:
        yield running
    finally:
        await running.stop()


async def test_what_the_documented_receiver_sends_is_accepted(server: RunningServer) -> None:
    hook = webhook_config(documented())
    assert hook["send_resolved"] is True
    authorization = hook["http_config"]["authorization"]
    assert authorization["type"] == "Bearer" and "credentials_file" in authorization
    url = urlsplit(hook["url"])
    assert (url.path, url.query) == ("/integrations/alertmanager", "type=ops.alert")
    # Alertmanager sends "Authorization: <type> <the file's contents, trimmed>".
    headers = {"Authorization": f"{authorization['type']} {KEYS['alice']}"}
    payload = webhook(probe_failure("https://k.example.org", "1b1b1b1b1b1b1b1b", uns_type=None))
    base = f"http://127.0.0.1:{server.app.http_port}"
    async with httpx.AsyncClient(base_url=base) as http:
        answer = await http.post(f"{url.path}?{url.query}", json=payload, headers=headers)
    assert answer.status_code == 200, answer.text
    (result,) = answer.json()["results"]
    got = await server.stub("alice").GetNotification(
        pb.GetNotificationRequest(notification_id=result["notificationId"])
    )
    assert (got.notification.notification_type, got.notification.source) == (
        "ops.alert",
        "alertmanager",
    )


def alertmanager_binary() -> str:
    """Debian's prometheus-alertmanager (or upstream's alertmanager), or skip."""
    for name in ("prometheus-alertmanager", "alertmanager"):
        found = shutil.which(name, path=f"{search_path()}{os.pathsep}/usr/bin")
        if found is not None:
            return found
    skip_or_fail(
        "prometheus-alertmanager not found (Debian's prometheus-alertmanager package, "
        "or go install github.com/prometheus/alertmanager/cmd/alertmanager)"
    )
    raise AssertionError("unreachable")  # skip_or_fail always raises


class Alertmanager:
    """A real Alertmanager on loopback whose one receiver is the documented one, pointed
    at ``uns_url`` with ``key``; groups flushed at once so that the test waits little.
    ``resolve_timeout`` stays at its default (5m): a shorter one would resolve the alert
    by itself and hide whether the explicit resolution below reaches UNS."""

    def __init__(self, binary: str, root: Path, uns_url: str, key: str) -> None:
        config = documented()
        config["route"].update(group_wait="0s", group_interval="1s")
        hook = webhook_config(config)
        hook["url"] = uns_url
        key_file = root / "uns-producer-key"
        key_file.write_text(key + "\n")
        hook["http_config"]["authorization"]["credentials_file"] = str(key_file)
        (root / "alertmanager.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "alertmanager.log"
        self._log = self.log.open("wb")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={root / 'alertmanager.yml'}",
                f"--storage.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",  # one instance, no gossip port
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    async def wait_ready(self, http: httpx.AsyncClient) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if (await http.get(f"{self.url}/-/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)  # polling a condition, under the deadline above
        raise AssertionError(f"alertmanager did not start:\n{self.log.read_text()}")

    async def waiting(self, what: str, events: Awaitable[list[t.Event]]) -> list[t.Event]:
        """``events`` (an events_until) or an AssertionError carrying Alertmanager's log."""
        try:
            seen = await events
        except TimeoutError:
            raise AssertionError(f"no {what} from alertmanager:\n{self.log.read_text()}") from None
        return seen

    async def post_alert(self, http: httpx.AsyncClient, alert: dict[str, Any]) -> None:
        answer = await http.post(f"{self.url}/api/v2/alerts", json=[alert])
        assert answer.status_code == 200, answer.text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


async def test_a_real_alertmanager_pages_through_uns_and_its_resolution_withdraws(
    server: RunningServer, tmp_path: Path
) -> None:
    binary = alertmanager_binary()
    uns_url = f"http://127.0.0.1:{server.app.http_port}/integrations/alertmanager?type=demo.alert"
    manager = Alertmanager(binary, tmp_path, uns_url, KEYS["alice"])
    alice = server.stub("alice")
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            await manager.wait_ready(http)
            # Started a minute ago, so that "ended a second ago" below is after the start.
            started = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
            alert = {
                "labels": {"alertname": "DiskFull", "instance": "db-1", "severity": "page"},
                "annotations": {"summary": "Disk almost full on db-1"},
                "startsAt": started,
                "generatorURL": "http://prometheus.example.org:9090/graph",
            }
            await manager.post_alert(http, alert)
            (accepted,) = await manager.waiting(
                "notification",
                events_until(
                    alice,
                    pb.WatchEventsRequest(kinds=[t.EVENT_KIND_ACCEPTED], replay_history=True),
                    lambda seen: len(seen) >= 1,
                    within=NOTIFY_TIMEOUT_SECONDS,
                ),
            )
            got = await alice.GetNotification(
                pb.GetNotificationRequest(notification_id=accepted.notification_id)
            )
            n = got.notification
            assert (n.source, n.notification_type) == ("alertmanager", "demo.alert")
            assert n.title == "Disk almost full on db-1"
            assert n.metadata["instance"] == "db-1"
            assert n.idempotency_key.startswith(f"{n.dedup_key}@")  # fingerprint@startsAt

            # The alert clears (ended in the past, as Prometheus reports it): Alertmanager
            # sends it resolved at the group's next flush, and UNS withdraws.
            ended = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
            await manager.post_alert(http, {**alert, "endsAt": ended})
            (withdrawn,) = await manager.waiting(
                "resolution",
                events_until(
                    alice,
                    pb.WatchEventsRequest(
                        notification_ids=[n.id],
                        kinds=[t.EVENT_KIND_WITHDRAWN],
                        replay_history=True,
                    ),
                    lambda seen: len(seen) >= 1,
                    within=NOTIFY_TIMEOUT_SECONDS,
                ),
            )
            assert withdrawn.payload["reason"] == "resolved at source"
    finally:
        manager.stop()
