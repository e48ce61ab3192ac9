"""The one interface every delivery adapter implements, and the values it trades in.

An adapter answers a single question per call: did the provider *explicitly accept* this
message, and if not, is trying again worthwhile? It never decides *when* to retry (the
dispatch worker and the domain retry schedule own that) and it never raises for provider
problems: timeouts, refused connections, throttling and rejections all come back as a
classified :class:`ChannelResult`, so the worker can record every provider observation.

Classification rules (SPEC §2 "Channels"):

* delivered  -- only an explicit accepted response (per-provider, see each adapter);
* transient  -- timeouts, transport/connection errors, HTTP 429 and 5xx, SMTP 4xx;
* permanent  -- every other rejection, including a 2xx whose body is not the acceptance
  the provider documents (a silent or odd "success" is never proof of delivery).

Results never carry credentials: adapters pass every error string and metadata value
through :func:`uns_server.channels._redact.scrub_result` with their own secrets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class AnswerLinks:
    """Signed links (and their tokens) that let one recipient answer a notification:
    each opens a page on the HTTP surface; the tokens also ride in Slack buttons."""

    acknowledge_url: str
    dismiss_url: str
    acknowledge_token: str
    dismiss_token: str
    # The server's public base URL, for a provider told where to post the answer
    # (Twilio's Gather action); "" where none was given.
    public_url: str = ""


@dataclass(frozen=True)
class OutboundMessage:
    """One delivery attempt of one notification on one channel.

    ``idempotency_token`` is stable across attempts of the same notification on the same
    channel; adapters hand it to the provider as its dedup key (webhook-id, PagerDuty
    dedup_key, email Message-ID) so a retry after an uncertain outcome collapses
    provider-side instead of paging someone twice.
    """

    notification_id: str
    notification_type: str
    intent: str
    title: str
    message: str
    source: str
    priority: str
    correlation_id: str
    metadata: Mapping[str, Any]
    attempt: int
    idempotency_token: str
    require_ack: bool = False
    # recipient identity -> its links; None when the HTTP surface is off.
    links: Callable[[str], AnswerLinks] | None = field(default=None, compare=False, repr=False)

    def action_links(self, recipient: str) -> AnswerLinks | None:
        """The Acknowledge/Dismiss links for ``recipient`` (``email:...``, ``slack:...``),
        when the notification needs an answer and links can be made. A person's own
        message (``recipient_id``) carries links signed for ``recipient:<id>``
        whatever the channel, so their answer settles as them."""
        if not self.require_ack or self.links is None:
            return None
        return self.links(f"recipient:{self.recipient_id}" if self.recipient_id else recipient)

    # A reminder or escalation step of a delivered notification ("REMINDER",
    # "ESCALATION"; empty for the delivery itself) and its 1-based number.
    follow_up: str = ""
    follow_up_number: int = 0
    # A targeted person's own message (SPEC §6): who, and their address on this
    # channel (an email address, a Slack user id for a direct message, ...), which
    # replaces the channel's configured destination. Empty for a shared message.
    recipient_id: str = ""
    to: str = ""
    # Why the policy's template failed to render (``domain.templates``): the raw title
    # and message are sent, and the attempt records this (``template_error``).
    template_error: str = ""


@dataclass(frozen=True)
class ChannelResult:
    """What the provider said, classified.

    ``retryable`` is meaningful only when ``success`` is false. ``retry_after_seconds`` is
    the provider's own hint (HTTP Retry-After); the caller may wait longer, never less.
    ``throttled`` reports that the provider asked us to slow down (HTTP 429, Slack's
    ``ratelimited``) rather than failed; what that costs the work is the domain's call
    (``domain.lifecycle``: a deferral that spends no attempt, within its bounds).
    ``metadata`` holds small, credential-free provider observations (HTTP status, SMTP
    code, provider error code, whether the provider may have acted despite the failure);
    it is always JSON-serializable.

    ``reference`` (successes only) is what the provider handed back to find the message
    again, plus whom it reached: ``type``, ``recipient`` (``slack:#alerts``,
    ``email:a@example.com``, ...) and per provider ``slack_channel`` + ``slack_ts``,
    ``email_message_id``, ``pagerduty_dedup_key`` or ``webhook_id``. It is kept on the
    notification and used to update the message when the obligation ends.
    """

    success: bool
    retryable: bool
    message_id: str | None = None
    error: str | None = None
    retry_after_seconds: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    reference: Mapping[str, str] = field(default_factory=dict)
    throttled: bool = False

    @classmethod
    def delivered(
        cls,
        message_id: str | None,
        *,
        metadata: Mapping[str, Any] | None = None,
        reference: Mapping[str, str] | None = None,
    ) -> ChannelResult:
        """The provider explicitly accepted the message (``message_id`` is its id for it)."""
        return cls(True, False, message_id, None, None, _copy(metadata), dict(reference or {}))

    @classmethod
    def transient(
        cls,
        error: str,
        *,
        retry_after_seconds: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        throttled: bool = False,
    ) -> ChannelResult:
        """Not delivered, and a later attempt may succeed (timeouts, 429, 5xx, SMTP 4xx);
        ``throttled``: the provider asked us to wait (429), it did not fail."""
        return cls(
            False, True, None, error, retry_after_seconds, _copy(metadata), throttled=throttled
        )

    @classmethod
    def permanent(cls, error: str, *, metadata: Mapping[str, Any] | None = None) -> ChannelResult:
        """Not delivered, and repeating the same request will not change the answer."""
        return cls(False, False, None, error, None, _copy(metadata))


def _copy(metadata: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A private plain-dict copy: typed read-only, yet ``dataclasses.asdict`` and
    # ``json.dumps`` (how results get recorded) work on it, unlike a MappingProxyType.
    return dict(metadata) if metadata else {}


@runtime_checkable
class Channel(Protocol):
    """A delivery adapter. ``send`` classifies provider problems instead of raising them.

    Exceptions that still escape ``send`` are programming errors (or cancellation, which
    adapters never swallow); the dispatch worker treats them as an unknown outcome.
    """

    name: str

    async def send(self, message: OutboundMessage) -> ChannelResult:
        """Attempt one delivery and report the provider's answer."""
        ...

    async def aclose(self) -> None:
        """Release what the adapter holds; safe to call more than once."""
        ...


@dataclass(frozen=True)
class ObligationOutcome:
    """How an obligation ended, to update the messages that announced it (or that it
    was snoozed, shown on the message whose Snooze button was pressed)."""

    state: str  # ACKED, DISMISSED, TIMED_OUT (or another terminal ack state), SNOOZED
    actor: str
    via: str
    at: str  # ISO 8601
    title: str
    message: str
    priority: str = ""
    intent: str = ""
    source: str = ""
    notification_id: str = ""

    @property
    def summary(self) -> str:
        """One line for people: who answered and when, or that nobody did."""
        when = self.at.replace("T", " ")[:19] + " UTC"
        if self.state == "ACKED":
            return f"Acknowledged by {self.actor} at {when}"
        if self.state == "DISMISSED":
            return f"Dismissed by {self.actor} at {when}"
        if self.state == "TIMED_OUT":
            return f"Not answered in time ({when}); escalation required"
        if self.state == "WITHDRAWN":
            return f"Withdrawn by {self.actor} at {when}; no answer needed"
        if self.state == "SNOOZED":  # not an ending: ``at`` is the snooze's end
            return f"Snoozed by {self.actor} until {when}; the answer is still owed"
        return f"{self.state.capitalize()} by {self.actor} at {when}"


@runtime_checkable
class UpdatableChannel(Protocol):
    """A channel that can change a message it sent (``reference``, from its delivery)."""

    name: str

    async def update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """Show ``settlement`` on the sent message; classified like ``send``."""
        ...
