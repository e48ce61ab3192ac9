"""SMTP against a real aiosmtpd server on loopback: acceptance, reply classes, TLS, auth."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.channels.conftest import PLANTED_SECRET, assert_secret_absent, make_message
from tests.support.http_receiver import unused_tcp_port
from uns_server.channels.config import EmailConfig
from uns_server.channels.email import EmailChannel

USERNAME = "uns"


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: Message
    tls: bool
    authenticated: bool


@dataclass
class Handler:
    """Records accepted mail; ``rcpt_reply``/``data_reply`` script refusals."""

    received: list[Received] = field(default_factory=list)
    rcpt_reply: dict[str, str] = field(default_factory=dict)  # address -> reply
    data_reply: str | None = None
    data_delay_seconds: float = 0.0

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        if address in self.rcpt_reply:
            return self.rcpt_reply[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.data_delay_seconds:
            await asyncio.sleep(self.data_delay_seconds)
        if self.data_reply:
            return self.data_reply
        self.received.append(
            Received(
                envelope.mail_from,
                list(envelope.rcpt_tos),
                message_from_bytes(envelope.original_content),
                session.ssl is not None,
                bool(session.authenticated),
            )
        )
        return "250 2.0.0 Message accepted for delivery"


def _authenticator(
    server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
) -> AuthResult:
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login == USERNAME.encode()
        and auth_data.password == PLANTED_SECRET.encode()
    )
    return AuthResult(success=ok, handled=False)  # handled=False: the server answers 535


@dataclass
class SmtpServer:
    handler: Handler
    port: int

    def config(self, **overrides: Any) -> EmailConfig:
        values: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.port,
            "from_addr": "UNS <uns@example.com>",
            "to": ("oncall@example.com",),
            "local_hostname": "uns.test",
            "timeout_seconds": 5.0,
        }
        values.update(overrides)
        return EmailConfig(**values)


async def _start(handler: Handler, **smtp_kwargs: Any) -> tuple[Controller, int]:
    port = unused_tcp_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port, **smtp_kwargs)
    await asyncio.to_thread(controller.start)
    return controller, port


@pytest.fixture
async def smtp() -> AsyncIterator[SmtpServer]:
    handler = Handler()
    controller, port = await _start(handler, authenticator=_authenticator, auth_require_tls=False)
    yield SmtpServer(handler, port)
    await asyncio.to_thread(controller.stop)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a throwaway certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    yield cert, key


@pytest.fixture
async def smtp_starttls(tls_files: tuple[Path, Path]) -> AsyncIterator[SmtpServer]:
    cert, key = tls_files
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    handler = Handler()
    controller, port = await _start(
        handler,
        tls_context=context,
        require_starttls=True,
        authenticator=_authenticator,
        auth_require_tls=True,
    )
    yield SmtpServer(handler, port)
    await asyncio.to_thread(controller.stop)


async def test_delivered_mail_carries_the_generated_message_id(smtp: SmtpServer) -> None:
    result = await EmailChannel("mail", smtp.config()).send(make_message())
    assert result.success and result.message_id
    [received] = smtp.handler.received
    assert received.mail_from == "uns@example.com"
    assert received.rcpt_tos == ["oncall@example.com"]
    mail = received.message
    assert mail["Message-ID"] == result.message_id
    assert result.message_id.endswith("@example.com>")
    assert mail["Subject"] == "[HIGH] Arm 3 stalled"
    assert mail["X-UNS-Notification-Id"] == make_message().notification_id
    assert mail["X-UNS-Correlation-Id"] == "corr-42"
    body = mail.get_payload(decode=True)
    assert isinstance(body, bytes) and b"Joint 2 over torque" in body


async def test_message_id_is_stable_across_attempts(smtp: SmtpServer) -> None:
    channel = EmailChannel("mail", smtp.config())
    first = await channel.send(make_message(attempt=1))
    second = await channel.send(make_message(attempt=2))
    other = await channel.send(make_message(idempotency_token="another"))
    assert first.message_id == second.message_id != other.message_id


async def test_header_injection_through_the_title_is_neutralised(smtp: SmtpServer) -> None:
    result = await EmailChannel("mail", smtp.config()).send(
        make_message(title="hi\r\nBcc: attacker@example.net")
    )
    assert result.success
    [received] = smtp.handler.received
    assert received.message["Bcc"] is None
    assert received.rcpt_tos == ["oncall@example.com"]


@pytest.mark.parametrize(
    ("reply", "retryable"),
    [
        ("451 4.3.0 Try again later", True),
        ("450 4.2.1 Mailbox busy", True),
        ("550 5.1.1 No such user", False),
        ("553 5.1.3 Bad address", False),
    ],
)
async def test_recipient_refusal_is_classified_by_reply_class(
    smtp: SmtpServer, reply: str, retryable: bool
) -> None:
    smtp.handler.rcpt_reply["oncall@example.com"] = reply
    result = await EmailChannel("mail", smtp.config()).send(make_message())
    assert not result.success and result.retryable is retryable
    assert reply.split()[0] in (result.error or "")
    assert smtp.handler.received == []


@pytest.mark.parametrize(
    ("reply", "retryable"),
    [("452 4.3.1 Insufficient storage", True), ("554 5.7.1 Rejected as spam", False)],
)
async def test_data_refusal_is_classified_by_reply_class(
    smtp: SmtpServer, reply: str, retryable: bool
) -> None:
    smtp.handler.data_reply = reply
    result = await EmailChannel("mail", smtp.config()).send(make_message())
    assert not result.success and result.retryable is retryable
    assert result.metadata["smtp_code"] == int(reply[:3])


async def test_partial_refusal_still_delivers_and_names_refused_recipients(
    smtp: SmtpServer,
) -> None:
    smtp.handler.rcpt_reply["gone@example.com"] = "550 5.1.1 No such user"
    config = smtp.config(to=("oncall@example.com", "gone@example.com"))
    result = await EmailChannel("mail", config).send(make_message())
    assert result.success
    assert result.metadata["refused_recipients"] == ["gone@example.com"]


async def test_connection_refused_is_transient() -> None:
    config = EmailConfig(
        host="127.0.0.1",
        port=unused_tcp_port(),
        from_addr="uns@example.com",
        to=("a@example.com",),
        local_hostname="uns.test",
    )
    result = await EmailChannel("mail", config).send(make_message())
    assert not result.success and result.retryable
    assert result.metadata["provider_effect_possible"] is False
    # Where, as the HTTP channels say it (the console groups and shows it).
    assert result.error == f"connection refused to 127.0.0.1:{config.port}"


async def test_server_that_never_greets_times_out_as_transient() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        config = EmailConfig(
            host="127.0.0.1",
            port=port,
            from_addr="uns@example.com",
            to=("a@example.com",),
            local_hostname="uns.test",
            timeout_seconds=0.3,
        )
        result = await EmailChannel("mail", config).send(make_message())
    finally:
        server.close()
    assert not result.success and result.retryable


async def test_slow_data_reply_times_out_as_transient_and_may_have_been_accepted(
    smtp: SmtpServer,
) -> None:
    smtp.handler.data_delay_seconds = 1.0
    result = await EmailChannel("mail", smtp.config(timeout_seconds=0.3)).send(make_message())
    assert not result.success and result.retryable
    assert result.metadata["provider_effect_possible"] is True


async def test_wrong_password_is_permanent_and_never_leaks(
    smtp: SmtpServer, debug_logs: pytest.LogCaptureFixture
) -> None:
    wrong = PLANTED_SECRET + "-wrong"
    config = smtp.config(username=USERNAME, password=wrong, allow_plaintext_auth=True)
    result = await EmailChannel("mail", config).send(make_message())
    assert not result.success and not result.retryable
    assert result.metadata["smtp_code"] == 535
    assert_secret_absent(result, debug_logs, wrong, PLANTED_SECRET)


async def test_starttls_with_auth_delivers_over_tls(
    smtp_starttls: SmtpServer, tls_files: tuple[Path, Path], debug_logs: pytest.LogCaptureFixture
) -> None:
    config = smtp_starttls.config(
        starttls=True, username=USERNAME, password=PLANTED_SECRET, ca_file=str(tls_files[0])
    )
    result = await EmailChannel("mail", config).send(make_message())
    assert result.success, result.error
    [received] = smtp_starttls.handler.received
    assert received.tls and received.authenticated
    assert_secret_absent(result, debug_logs)


async def test_starttls_with_an_untrusted_certificate_is_not_delivered(
    smtp_starttls: SmtpServer,
) -> None:
    config = smtp_starttls.config(starttls=True, username=USERNAME, password=PLANTED_SECRET)
    result = await EmailChannel("mail", config).send(make_message())
    assert not result.success and result.retryable
    assert "TLS negotiation failed" in (result.error or "")
    assert result.metadata["provider_effect_possible"] is False
    assert smtp_starttls.handler.received == []


async def test_required_starttls_on_a_server_without_it_is_permanent(smtp: SmtpServer) -> None:
    result = await EmailChannel("mail", smtp.config(starttls=True)).send(make_message())
    assert not result.success and not result.retryable
    assert "STARTTLS" in (result.error or "")
    assert smtp.handler.received == []


async def test_server_requiring_starttls_refuses_a_cleartext_client(
    smtp_starttls: SmtpServer,
) -> None:
    result = await EmailChannel("mail", smtp_starttls.config()).send(make_message())
    assert not result.success and not result.retryable  # 530 Must issue a STARTTLS first


def test_config_is_frozen() -> None:
    config = EmailConfig(host="h", from_addr="a@b", to=("c@d",))
    with pytest.raises(AttributeError):
        config.host = "x"  # type: ignore[misc]
    assert replace(config, port=2525).port == 2525
