"""People and rotations (``/console/people``): who can be asked, and for each rotation
who is on call now and who is next, through the same service as RecipientService."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from uns_server.domain.oncall import OnCall, on_call
from uns_server.domain.people import Recipient, Rotation
from uns_server.http.console.context import Console
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session

ROWS_MAX = 500  # per table; the rest through uns-admin or ListRecipients


@dataclass(frozen=True)
class RotationRow:
    rotation: Rotation
    now: OnCall
    names: dict[str, str]

    def name(self, recipient_id: str) -> str:
        return self.names.get(recipient_id, recipient_id)


async def people_page(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    assert c.people is not None
    recipients: list[Recipient]
    recipients, more_people = await c.people.list_recipients(ROWS_MAX)
    rotations, more_rotations = await c.people.list_rotations(ROWS_MAX)
    names = {r.recipient_id: r.display_name for r in recipients}
    now = c.clock()
    rows = [RotationRow(r, on_call(r, now), names) for r in rotations]
    return render(
        request,
        "people.html",
        title="People",
        recipients=recipients,
        rotations=rows,
        capped=bool(more_people or more_rotations),
    )
