"""The clients' maintenance-window helpers (``uns.v1.MaintenanceService``) against a
real server: async and blocking alike."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from uns_clients import AsyncClient, Client, InvalidRequest, NotFound, PermissionDenied

START = datetime(2026, 3, 23, 21, 0, tzinfo=UTC)


async def test_put_get_list_delete(
    async_client: Callable[[str], AsyncClient], sync_client: Callable[[str], Client]
) -> None:
    oscar = async_client("oscar")
    put = await oscar.put_maintenance_window(
        "db-upgrade",
        start_time=START,
        end_time=START + timedelta(hours=4),
        notification_types=["db.*", "backup.failed"],
        reason="PostgreSQL 17 upgrade",
    )
    assert (put.window_id, list(put.notification_types), put.updated_by) == (
        "db-upgrade",
        ["db.*", "backup.failed"],
        "oscar",
    )
    assert put.end_time.ToDatetime(tzinfo=UTC) == START + timedelta(hours=4)
    assert (await oscar.get_maintenance_window("db-upgrade")).reason == "PostgreSQL 17 upgrade"
    blocking = sync_client("oscar")
    await asyncio.to_thread(
        blocking.put_maintenance_window,
        "all",
        start_time=START,
        end_time=START + timedelta(minutes=5),
        notification_types=["*"],
    )
    listed = await asyncio.to_thread(blocking.list_maintenance_windows)
    assert [w.window_id for w in listed] == ["all", "db-upgrade"]

    with pytest.raises(InvalidRequest) as bad:
        await oscar.put_maintenance_window(
            "bad", start_time=START, end_time=START, notification_types=["db.*"]
        )
    assert "window.end_time" in str(bad.value)
    with pytest.raises(PermissionDenied):
        await async_client("alice").list_maintenance_windows()

    deleted = await asyncio.to_thread(blocking.delete_maintenance_window, "all")
    assert deleted.window_id == "all"
    with pytest.raises(NotFound):
        await oscar.delete_maintenance_window("all")
    assert [w.window_id for w in await oscar.list_maintenance_windows()] == ["db-upgrade"]
