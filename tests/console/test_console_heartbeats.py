"""The console's heartbeats page over plain HTTP: each heartbeat with its state (up,
late, paging), its last beat and a link to the page its silence raised (issue 44)."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from tests.console.conftest import ConsoleRig
from tests.support.people import stub_as
from uns.v1 import heartbeat_service_pb2 as hpb
from uns.v1 import heartbeat_service_pb2_grpc as hpb_grpc


def _heartbeat(heartbeat_id: str, minutes: int) -> hpb.HeartbeatMonitor:
    heartbeat = hpb.HeartbeatMonitor(
        heartbeat_id=heartbeat_id,
        notification_type="ops.hook",
        title=f"{heartbeat_id} went silent",
        message="No beat",
    )
    heartbeat.interval.FromTimedelta(timedelta(minutes=minutes))
    return heartbeat


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_the_heartbeats_page_shows_states_and_pages(console: ConsoleRig) -> None:
    operator = stub_as(console.server, hpb_grpc.HeartbeatServiceStub, "oscar")
    async with httpx.AsyncClient() as http:
        await console.sign_in(http)
        empty = await http.get(console.url("/console/heartbeats"))
        assert empty.status_code == 200 and "No heartbeats yet" in empty.text
        for heartbeat_id, minutes in (("nightly-backup", 10), ("weekly-report", 600)):
            await operator.PutHeartbeat(
                hpb.PutHeartbeatRequest(heartbeat=_heartbeat(heartbeat_id, minutes))
            )
        console.clock.advance(minutes=11)
        assert (await console.server.app.timers.run_once()).paged == 1
        page = await http.get(console.url("/console/heartbeats"))
    assert page.status_code == 200
    got = await operator.GetHeartbeat(hpb.GetHeartbeatRequest(heartbeat_id="nightly-backup"))
    nid = got.heartbeat.notification_id
    text = page.text
    backup = text[text.index('id="heartbeat-nightly-backup"') :]
    assert "PAGING" in backup.split("</tr>")[0]
    assert f'href="/console/notifications/{nid}"' in backup.split("</tr>")[0]
    report = text[text.index('id="heartbeat-weekly-report"') :].split("</tr>")[0]
    assert "UP" in report and "never" in report
    assert 'href="/console/heartbeats"' in text  # in the navigation
