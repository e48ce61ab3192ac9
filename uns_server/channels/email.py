"""Email over SMTP (aiosmtplib): one connection per message, STARTTLS or implicit TLS.

Accepted means the server's final reply to DATA was 2xx for at least one recipient.
SMTP reply classes decide the rest: 4xx (greylisting, mailbox busy, temporary auth
failure) is transient, 5xx is permanent; connection problems and timeouts are transient.
A server that lacks what the configuration demands (STARTTLS, AUTH) is permanent: sending
anyway, in cleartext, is not an option to fall back to.

The ``Message-ID`` is derived from the idempotency token, so every attempt of one
notification carries the same id: it is both the id we record and the strongest dedup key
SMTP offers to receiving systems. The password never reaches results or logs.
"""

from __future__ import annotations

import asyncio
import email.policy
import hashlib
import json
import os
import socket
import ssl
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from typing import Any

import aiosmtplib

from uns_server.channels._redact import scrub_result, secret_variants
from uns_server.channels.base import AnswerLinks, ChannelResult, OutboundMessage
from uns_server.channels.config import EmailConfig, channel_endpoint

# Lines up to RFC 5322's limit: a link is one long word, and folding one into RFC 2047
# encoded-words would make the link headers unreadable to people and to tools.
_POLICY = email.policy.default.clone(max_line_length=998)
_WIRE_POLICY = email.policy.SMTP.clone(max_line_length=998)


def _one_line(text: str) -> str:
    """Header-safe text: CR/LF in producer input must not inject headers."""
    return " ".join(text.split())


def message_id_for(token: str, from_addr: str) -> str:
    """``<hash.uns@domain>``: stable per token, valid whatever characters the token has."""
    domain = parseaddr(from_addr)[1].rpartition("@")[2] or "uns.invalid"
    return f"<{hashlib.sha256(token.encode()).hexdigest()[:32]}.uns@{domain}>"


def compose(
    message: OutboundMessage, config: EmailConfig, links: AnswerLinks | None = None
) -> EmailMessage:
    """The email for one notification: plain text, UNS identifiers in ``X-UNS-*`` headers,
    and with ``links`` the Acknowledge/Dismiss links in the body and in headers."""
    email = EmailMessage(policy=_POLICY)
    email["From"] = config.from_addr
    email["To"] = message.to or ", ".join(config.to)
    email["Subject"] = _one_line(f"[{message.priority}] {message.title}")
    email["Date"] = formatdate(usegmt=True)
    email["Message-ID"] = message_id_for(message.idempotency_token, config.from_addr)
    email["X-UNS-Notification-Id"] = _one_line(message.notification_id)
    email["X-UNS-Notification-Type"] = _one_line(message.notification_type)
    email["X-UNS-Priority"] = _one_line(message.priority)
    if message.correlation_id:
        email["X-UNS-Correlation-Id"] = _one_line(message.correlation_id)
    answer = ""
    if links is not None:
        email["X-UNS-Acknowledge-URL"] = links.acknowledge_url
        email["X-UNS-Dismiss-URL"] = links.dismiss_url
        answer = (
            "An answer is needed. Open a link to see the request and answer it:\n"
            f"  Acknowledge: {links.acknowledge_url}\n"
            f"  Dismiss:     {links.dismiss_url}\n\n"
        )
    details = [
        f"Intent: {message.intent}",
        f"Priority: {message.priority}",
        f"Source: {message.source}",
        f"Notification: {message.notification_id} ({message.notification_type})",
    ]
    if message.correlation_id:
        details.append(f"Correlation: {message.correlation_id}")
    if message.metadata:
        details.append("Metadata: " + json.dumps(dict(message.metadata), default=str))
    email.set_content(f"{message.message}\n\n{answer}-- \n" + "\n".join(details) + "\n")
    return email


def _not_connected(exc: Exception, where: str) -> str:
    """A connection never made, as ``channels._http`` says it: the server's host and
    port (never the user or password), not the library's repr."""
    cause = exc.__cause__
    host = where.rpartition(":")[0]
    if isinstance(cause, ConnectionRefusedError):
        return f"connection refused to {where}"
    if isinstance(cause, socket.gaierror):
        return f"could not connect: the name {host} does not resolve"
    if isinstance(exc, aiosmtplib.SMTPConnectTimeoutError) or isinstance(cause, TimeoutError):
        return f"could not connect: no connection to {where} in time"
    if isinstance(cause, OSError) and cause.errno:
        return f"could not connect to {where}: {os.strerror(cause.errno).lower()}"
    return f"could not connect to {where} ({type(exc).__name__})"


def classify_smtp_error(exc: Exception, where: str = "") -> ChannelResult:
    """SMTP failures by reply class and by where the conversation broke off; ``where``
    is the server's ``host:port``, named when no connection was made."""
    kind = type(exc).__name__
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [r.code for r in exc.recipients]
        first = exc.recipients[0] if exc.recipients else None
        detail = f"{first.code} {first.message}" if first else "no recipient accepted"
        meta: dict[str, Any] = {"smtp_codes": codes, "provider_effect_possible": False}
        if any(400 <= code < 500 for code in codes):
            return ChannelResult.transient(f"all recipients refused: {detail}", metadata=meta)
        return ChannelResult.permanent(f"all recipients refused: {detail}", metadata=meta)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        meta = {"smtp_code": exc.code, "provider_effect_possible": False}
        error = f"SMTP {exc.code} {exc.message} ({kind})"
        if 500 <= exc.code < 600:
            return ChannelResult.permanent(error, metadata=meta)
        return ChannelResult.transient(error, metadata=meta)
    if isinstance(exc, aiosmtplib.SMTPConnectError | aiosmtplib.SMTPConnectTimeoutError):
        text = _not_connected(exc, where) if where else f"could not connect ({kind}: {exc})"
        return ChannelResult.transient(text, metadata={"provider_effect_possible": False})
    if isinstance(exc, ssl.SSLError):
        # Raised during STARTTLS, before any mail transaction: nothing can have been sent.
        return ChannelResult.transient(
            f"TLS negotiation failed ({kind}: {exc})", metadata={"provider_effect_possible": False}
        )
    if isinstance(exc, aiosmtplib.SMTPServerDisconnected | TimeoutError | OSError):
        # TimeoutError covers aiosmtplib's read timeouts and our overall deadline.
        return ChannelResult.transient(
            f"connection lost or timed out ({kind})", metadata={"provider_effect_possible": True}
        )
    if isinstance(exc, aiosmtplib.SMTPException):
        # STARTTLS/AUTH/SMTPUTF8 not offered by the server: configuration, not weather.
        return ChannelResult.permanent(
            f"server cannot do what the channel requires ({kind}: {exc})",
            metadata={"provider_effect_possible": False},
        )
    return ChannelResult.permanent(
        f"message could not be sent ({kind})", metadata={"provider_effect_possible": False}
    )


class EmailChannel:
    """Sends one plain-text email per notification to the configured recipients."""

    def __init__(self, name: str, config: EmailConfig) -> None:
        self.name = name
        self._config = config
        self._secrets = secret_variants(s for s in (config.password,) if s)
        # One message reaches every configured address: together they are the recipient.
        self.recipient = "email:" + ",".join(parseaddr(a)[1] or a for a in config.to)

    async def send(self, message: OutboundMessage) -> ChannelResult:
        return scrub_result(await self._send(message), self._secrets)

    async def _send(self, message: OutboundMessage) -> ChannelResult:
        config = self._config
        try:
            email = compose(message, config, message.action_links(self.recipient))
            # A person's own message goes to their address alone.
            to = [message.to] if message.to else list(config.to)
        except (TypeError, ValueError) as exc:
            return ChannelResult.permanent(f"message cannot be encoded ({type(exc).__name__})")
        try:
            async with asyncio.timeout(config.timeout_seconds):
                refused, reply = await aiosmtplib.send(
                    # Flattened here: aiosmtplib's own flattening folds at 78 columns.
                    email.as_bytes(policy=_WIRE_POLICY),
                    sender=parseaddr(config.from_addr)[1],
                    recipients=to,
                    hostname=config.host,
                    port=config.port,
                    username=config.username,
                    password=config.password,
                    use_tls=config.use_tls,
                    start_tls=config.starttls,
                    validate_certs=config.validate_certs,
                    cert_bundle=config.ca_file,
                    local_hostname=config.local_hostname,
                    timeout=config.timeout_seconds,
                )
        except (aiosmtplib.SMTPException, OSError, ValueError) as exc:
            return classify_smtp_error(exc, channel_endpoint(config))
        message_id = str(email["Message-ID"])
        return ChannelResult.delivered(
            message_id,
            metadata={"smtp_reply": reply, "refused_recipients": sorted(refused)},
            reference={
                "type": "email",
                "recipient": f"email:{message.to}" if message.to else self.recipient,
                "email_message_id": message_id,
            },
        )

    async def aclose(self) -> None:
        """Nothing to release: each message uses its own SMTP connection."""
