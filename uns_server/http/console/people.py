"""People and rotations (``/console/people``): who can be asked, and for each rotation
who is on call now and who is next, through the same service as RecipientService."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from markupsafe import Markup, escape

from uns_server.domain.oncall import OnCall, on_call
from uns_server.domain.people import Recipient, Rotation
from uns_server.http.console.context import Console
from uns_server.http.console.reading import Names
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session

ROWS_MAX = 500  # per table; the rest through uns-admin or ListRecipients


@dataclass(frozen=True)
class RotationRow:
    rotation: Rotation
    now: OnCall
    names: Names
    # Until when the person on call now is inside their own quiet hours (their messages
    # held, but SAFETY and ESCALATION), in the quiet hours' zone; "" when awake.
    held: str = ""

    def name(self, recipient_id: str) -> Markup:
        """The display name, the id in its title."""
        person = self.names.people.get(recipient_id)
        shown = person.display_name if person else recipient_id
        rid = escape(recipient_id)
        return Markup(f'<span class="person" title="recipient:{rid}">{escape(shown)}</span>')


async def people_page(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    assert c.people is not None
    recipients: list[Recipient]
    recipients, more_people = await c.people.list_recipients(ROWS_MAX)
    rotations, more_rotations = await c.people.list_rotations(ROWS_MAX)
    names = Names({r.recipient_id: r for r in recipients})
    now = c.clock()
    rows = []
    for rotation in rotations:
        current = on_call(rotation, now)
        until = names.held_until(current.recipient_id, now)
        held = names.local(current.recipient_id, until) if until else ""
        rows.append(RotationRow(rotation, current, names, held))
    return render(
        request,
        "people.html",
        title="People",
        recipients=recipients,
        rotations=rows,
        capped=bool(more_people or more_rotations),
    )
