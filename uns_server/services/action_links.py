"""Action links: issued into messages by dispatch, opened and answered over HTTP.

Opening a link (``view``) changes nothing; answering (``answer``) goes through
``AckService.answer``, the same decision as the ``Acknowledge`` RPC, with the link's
recipient identity as the actor and ``via="link"``; a link that acknowledges may also
snooze for ``LINK_SNOOZE`` (``snooze``: whoever may acknowledge may snooze).
Tampered, expired, revoked and unknown links are all the same ``None``: the caller
answers one plain 404.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

from uns_server.channels.base import AnswerLinks
from uns_server.domain.enums import ACK_OWED
from uns_server.domain.links import (
    ACK,
    DISMISS,
    LinkClaims,
    LinkSigner,
    outlives,
    token_hash,
)
from uns_server.domain.records import Notification
from uns_server.services.acks import AckService
from uns_server.services.snooze import Snoozes
from uns_server.store.port import ReadTransaction, Store

VIA_LINK = "link"
LINK_PATH = "/a/"
# Channels whose buttons answer through the machine-answer endpoint
# (``POST /a/{token}/answer?via=<type>``): the answer is recorded ``via`` that type.
MACHINE_VIAS = frozenset({"ntfy"})
# What a link's "Snooze" button asks for (SnoozeNotification takes any 1 s to 24 h).
LINK_SNOOZE = timedelta(minutes=30)
SNOOZE = "snooze"  # the page's action (any link that acknowledges offers it)


@dataclass(frozen=True)
class LinkView:
    """What an action page shows: the verified claims and the notification now."""

    token: str
    claims: LinkClaims
    notification: Notification


class ActionLinkService:
    def __init__(
        self,
        store: Store,
        acks: AckService,
        signer: LinkSigner,
        base_url: Callable[[], str],
        clock: Callable[[], datetime],
        *,
        lease_seconds: float,
        snoozes: Snoozes | None = None,
    ) -> None:
        self._store = store
        self._acks = acks
        self._snoozes = snoozes
        self.signer = signer
        self._base_url = base_url
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)

    def now(self) -> datetime:
        return self._clock()

    def url(self, token: str) -> str:
        return f"{self._base_url()}{LINK_PATH}{quote(token, safe='')}"

    def for_message(
        self, notification_id: str, ack_timeout_minutes: int, now: datetime
    ) -> Callable[[str], AnswerLinks]:
        """Link maker for one message: the ack deadline is set when the delivery
        settles, within the lease, so links expire at most one lease after it."""
        return self.until(notification_id, now + timedelta(minutes=ack_timeout_minutes))

    def until(self, notification_id: str, deadline: datetime) -> Callable[[str], AnswerLinks]:
        """Link maker for a message of a notification whose ack is due by ``deadline``
        (a reminder or escalation step: the deadline is known)."""
        expires_at = deadline + self._lease

        def make(recipient: str) -> AnswerLinks:
            ack, dismiss = (
                self.signer.issue(LinkClaims(notification_id, (action,), recipient, expires_at))
                for action in (ACK, DISMISS)
            )
            return AnswerLinks(self.url(ack), self.url(dismiss), ack, dismiss, self._base_url())

        return make

    async def verify(self, token: str) -> LinkClaims | None:
        """Valid, unexpired (or kept alive by a snooze: ``links.outlives``), unrevoked
        claims; None otherwise."""
        claims = self.signer.read(token)
        if claims is None:
            return None
        async with self._store.read() as tx:
            if await tx.action_links.is_revoked(token_hash(token)):
                return None
            if not await self._alive(tx, claims):
                return None
        return claims

    async def _alive(self, tx: ReadTransaction, claims: LinkClaims) -> bool:
        now = self._clock()
        if claims.expires_at > now:
            return True  # the row is read only for a link past its own expiry
        row = await tx.notifications.get(claims.notification_id)
        return row is not None and outlives(
            claims,
            ack_owed=row.ack_status in ACK_OWED,
            deadline=row.deadline,
            lease=self._lease,
            now=now,
        )

    async def view(self, token: str) -> LinkView | None:
        claims = await self.verify(token)
        if claims is None:
            return None
        async with self._store.read() as tx:
            found = await tx.notifications.get(claims.notification_id)
        return None if found is None else LinkView(token, claims, found)

    async def answer(
        self, view: LinkView, action: str, *, via: str = VIA_LINK
    ) -> tuple[Notification, bool]:
        """Settle as the link's recipient; raises the same refusals as Acknowledge.
        The second value is true for a repeat of the same answer (nothing changed)."""
        assert action in view.claims.actions
        assert via == VIA_LINK or via in MACHINE_VIAS
        return await self._acks.answer(
            view.claims.notification_id,
            actor=view.claims.recipient,
            via=via,
            dismiss=action == DISMISS,
            metadata={},
        )

    def may_snooze(self, view: LinkView) -> bool:
        """Whoever may acknowledge may snooze: a link that acknowledges offers it, while
        an answer is owed (an ack opened, PENDING or SNOOZED)."""
        owed = view.notification.ack_status in ACK_OWED
        return self._snoozes is not None and ACK in view.claims.actions and owed

    async def snooze(self, view: LinkView, *, via: str = VIA_LINK) -> Notification:
        """Snooze as the link's recipient for ``LINK_SNOOZE``; the refusals of an answer."""
        assert self._snoozes is not None and ACK in view.claims.actions
        return await self._snoozes.snooze_as(
            view.claims.notification_id, actor=view.claims.recipient, via=via, duration=LINK_SNOOZE
        )

    async def revoke(self, token: str, *, actor: str) -> LinkClaims | None:
        """Revoke a link that still verifies; None if it does not (nothing to revoke)."""
        claims = self.signer.read(token)
        if claims is None:
            return None
        async with self._store.write() as tx:
            if not await self._alive(tx, claims):
                return None
            await tx.action_links.revoke(
                token_hash(token), claims.notification_id, actor=actor, now=self._clock()
            )
        return claims
