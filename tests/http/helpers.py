"""Reading links out of captured messages, and driving the action page like a browser."""

from __future__ import annotations

import re
from email.message import Message

import httpx

_LINK = re.compile(r"(Acknowledge|Dismiss):\s+(\S+)")
_NONCE = re.compile(r'name="nonce" value="([^"]+)"')


def email_links(mail: Message) -> dict[str, str]:
    """{"Acknowledge": url, "Dismiss": url} from the plain-text body."""
    body = mail.get_payload(decode=True)
    assert isinstance(body, bytes)
    return dict(_LINK.findall(body.decode()))


def form_nonce(page: str) -> str:
    match = _NONCE.search(page)
    assert match, "the page has no answer form"
    return match.group(1)


async def click(http: httpx.AsyncClient, url: str, action: str) -> httpx.Response:
    """Open the page (which sets the form cookie), then submit its form with ``action``."""
    page = await http.get(url)
    assert page.status_code == 200, page.text
    return await http.post(url, data={"action": action, "nonce": form_nonce(page.text)})
