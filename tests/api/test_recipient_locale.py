"""``Recipient.locale`` (SPEC §7, issue 43 item 3, issue 45) through a real server on
SQLite: a BCP 47 tag is validated, stored in its canonical form,
returned to every reader (it is not personal data), and can be cleared."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.people import stub_as
from tests.support.server import RunningServer, start_server
from uns.v1 import recipient_service_pb2 as pb
from uns.v1 import recipient_service_pb2_grpc as pb_grpc


@pytest.fixture
async def srv(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_server(db_url, tmp_path, dispatch_enabled=False)
    try:
        yield running
    finally:
        await running.stop()


def people(server: RunningServer, who: str = "oscar") -> Any:
    return stub_as(server, pb_grpc.RecipientServiceStub, who)


def person(locale: str) -> pb.Recipient:
    return pb.Recipient(
        recipient_id="amelie",
        display_name="Amélie Tremblay",
        time_zone="America/Montreal",
        locale=locale,
    )


async def test_a_locale_is_stored_canonical_and_read_by_everyone(srv: RunningServer) -> None:
    put = await people(srv).PutRecipient(pb.PutRecipientRequest(recipient=person("fr-ca")))
    assert put.recipient.locale == "fr-CA"
    for who in ("oscar", "rita", "alice"):
        got = await people(srv, who).GetRecipient(pb.GetRecipientRequest(recipient_id="amelie"))
        assert got.recipient.locale == "fr-CA"
    listed = await people(srv).ListRecipients(pb.ListRecipientsRequest())
    assert [r.locale for r in listed.recipients] == ["fr-CA"]
    # Put again without one: the person has none any more.
    cleared = await people(srv).PutRecipient(pb.PutRecipientRequest(recipient=person("")))
    assert cleared.recipient.locale == ""


@pytest.mark.parametrize("locale", ["klingon", "fr_FR", "fr-", " fr", "x" * 40, "zz-ZZ"])
async def test_a_tag_that_is_not_bcp47_is_refused_on_its_field(
    srv: RunningServer, locale: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await people(srv).PutRecipient(pb.PutRecipientRequest(recipient=person(locale)))
    err = rich_error(info.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert "BCP 47" in err.violations["recipient.locale"]
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await people(srv).GetRecipient(pb.GetRecipientRequest(recipient_id="amelie"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
