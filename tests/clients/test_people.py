"""``AsyncClient.people``: typed helpers for RecipientService against a real server."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from uns_clients import AsyncClient, InvalidRequest, PermissionDenied, RecipientInUse

START = datetime(2026, 3, 23, 9, 0, tzinfo=UTC)


async def test_people_rotations_and_on_call(
    async_client: Callable[[str], AsyncClient],
) -> None:
    oscar = async_client("oscar").people
    put = await oscar.put_recipient(
        "alice",
        display_name="Alice",
        time_zone="Europe/Paris",
        contacts=[("log", "alice")],
        quiet_hours=("Europe/Paris", "22:00", "07:00"),
    )
    assert (put.recipient_id, put.contacts[0].channel, put.quiet_hours.end) == (
        "alice",
        "log",
        "07:00",
    )
    await oscar.put_recipient("bob", display_name="Bob", time_zone="UTC")
    rotation = await oscar.put_rotation(
        "primary",
        members=["alice", "bob"],
        start_time=START,
        shift=timedelta(days=1),
        time_zone="Europe/Paris",
        overrides=[("bob", START + timedelta(hours=2), START + timedelta(hours=3))],
    )
    assert list(rotation.members) == ["alice", "bob"]
    producer = async_client("alice").people
    assert [r.recipient_id async for r in producer.list_recipients(page_size=1)] == [
        "alice",
        "bob",
    ]
    assert [r.rotation_id async for r in producer.list_rotations()] == ["primary"]
    answer = await producer.on_call("primary", START)
    assert (answer.recipient_id, answer.next_recipient_id) == ("alice", "bob")
    assert answer.shift_end_time.ToDatetime(tzinfo=UTC) == START + timedelta(hours=2)
    assert (await producer.get_rotation("primary")).shift.seconds == 86400
    assert (await producer.get_recipient("bob")).display_name == "Bob"
    with pytest.raises(PermissionDenied):
        await producer.delete_rotation("primary")
    with pytest.raises(RecipientInUse) as info:
        await oscar.delete_recipient("bob")
    assert info.value.metadata["rotations"] == "primary"
    with pytest.raises(InvalidRequest):
        await oscar.put_rotation(
            "bad", members=["nobody"], start_time=START, shift=timedelta(hours=1), time_zone="UTC"
        )
    await oscar.delete_rotation("primary")
    assert (await oscar.delete_recipient("bob")).recipient_id == "bob"
