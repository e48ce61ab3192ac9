"""The console's maintenance windows: the windows page (open or not, types, reason, who
put it, the latest changes) and a held notification's hold on its page."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from google.protobuf import timestamp_pb2

from tests.console.conftest import ConsoleRig
from tests.support.people import stub_as
from uns.v1 import maintenance_service_pb2 as mpb
from uns.v1 import maintenance_service_pb2_grpc as mpb_grpc
from uns.v1 import types_pb2 as t

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def _at(rig: ConsoleRig, **delta: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime((rig.clock() + timedelta(**delta)).replace(microsecond=0))
    return ts


async def test_the_windows_page_and_a_held_notification(console: ConsoleRig) -> None:
    ops = stub_as(console.server, mpb_grpc.MaintenanceServiceStub, "oscar")
    for window_id, start, end in (("upgrade", -1, 60), ("later", 120, 180)):
        await ops.PutMaintenanceWindow(
            mpb.PutMaintenanceWindowRequest(
                window=mpb.MaintenanceWindow(
                    window_id=window_id,
                    start_time=_at(console, minutes=start),
                    end_time=_at(console, minutes=end),
                    notification_types=["ops.*"],
                    reason="database upgrade",
                )
            )
        )
    nid = await console.send("held-one")
    assert (await console.get(nid)).state == t.NOTIFICATION_STATE_PENDING
    async with httpx.AsyncClient(follow_redirects=False) as http:
        await console.sign_in(http)
        page = (await http.get(console.url("/console/windows"))).text
        assert 'id="window-upgrade"' in page and "<strong>open</strong>" in page
        assert "to come" in page and "database upgrade" in page and "<code>ops.*</code>" in page
        assert "PUT <code>upgrade</code> by oscar" in page
        detail = (await http.get(console.url(f"/console/notifications/{nid}"))).text
        assert 'id="f-held"' in detail and 'href="/console/windows#window-upgrade"' in detail
