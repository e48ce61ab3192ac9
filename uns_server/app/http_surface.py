"""The HTTP surface's wiring: action links, provider callbacks, the operator console,
the health endpoints and JSON over HTTP (``http.connect``, the gRPC methods themselves
over a loopback channel), over the same database and services as gRPC."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from uns_server.channels.config import (
    PagerDutyConfig,
    SlackConfig,
    TelegramConfig,
    channel_endpoint,
)
from uns_server.channels.slack import SlackChannel
from uns_server.channels.telegram import TelegramChannel
from uns_server.channels.twilio_config import TwilioSmsConfig, TwilioVoiceConfig
from uns_server.domain.links import LinkSigner
from uns_server.http import alertmanager as http_alertmanager
from uns_server.http import connect as http_connect
from uns_server.http import console as http_console
from uns_server.http import health as http_health
from uns_server.http import heartbeats as http_heartbeats
from uns_server.http import integrations as http_integrations
from uns_server.http import links as http_links
from uns_server.http import telegram as http_telegram
from uns_server.http import twilio as http_twilio
from uns_server.http.console.sessions import Sessions
from uns_server.services.action_links import ActionLinkService
from uns_server.services.provider_answers import ProviderAnswers, Snoozed
from uns_server.services.telegram_answers import TelegramAnswers
from uns_server.services.twilio_answers import TwilioAnswers
from uns_server.settings import ACTION_LINK_KEY_MIN_CHARS

if TYPE_CHECKING:
    from uns_server.app.root import App

log = logging.getLogger("uns.server")


DEV_LINK_KEY_FILE = "uns-dev-link-key.txt"


def link_service(app: App) -> ActionLinkService:
    keys = app.settings.link_keys
    if not keys:  # loopback only (settings refuse it elsewhere)
        keys = (dev_link_key(Path(app.settings.dev_key_file).with_name(DEV_LINK_KEY_FILE)),)
    return ActionLinkService(
        app.store,
        app.acks,
        LinkSigner(keys),
        lambda: app.public_url,
        app.clock,
        lease_seconds=app.settings.lease_seconds,
        snoozes=app.snoozes,
    )


def dev_link_key(path: Path) -> str:
    """The quickstart's link signing key, kept in ``path`` (beside the dev key file,
    created 0600) so the links in messages survive a restart. If the file cannot be
    read or written: a random key for this process only (its links die with it)."""
    try:
        try:
            key = path.read_text().strip()
        except FileNotFoundError:
            key = ""
        if len(key) >= ACTION_LINK_KEY_MIN_CHARS:
            return key
        key = secrets.token_urlsafe(32)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
    except OSError as exc:
        log.warning(
            "no --action-link-keys and the dev link key file is unusable: links are "
            "signed with a random key and stop working when this process exits",
            extra={"dev_link_key_file": str(path), "error": str(exc)},
        )
        return secrets.token_urlsafe(32)
    log.info(
        "no --action-link-keys: created a dev link key (links survive restarts of this "
        "quickstart; pass --action-link-keys in production)",
        extra={"dev_link_key_file": str(path)},
    )
    return key


def _ephemeral_reply(app: App) -> http_integrations.EphemeralReply:
    async def reply(response_url: str, text: str, posters: Sequence[str] | None) -> None:
        """Through the Slack channel that posted the message (any Slack channel if its
        reference is not recorded)."""
        names = list(posters or app.channels.names())
        for name in names:
            channel = app.channels.get(name) if name in app.channels else None
            if isinstance(channel, SlackChannel):
                result = await channel.reply_ephemeral(response_url, text)
                if not result.success:
                    log.warning(
                        "ephemeral Slack reply failed",
                        extra={"channel": name, "error": result.error},
                    )
                return

    return reply


def _snoozed_reply(app: App) -> http_integrations.SnoozedReply:
    async def show(response_url: str, snoozed: Snoozed, posters: Sequence[str] | None) -> None:
        """Through the Slack channel that posted the pressed message."""
        for name in posters or app.channels.names():
            channel = app.channels.get(name) if name in app.channels else None
            if isinstance(channel, SlackChannel):
                result = await channel.show_snoozed(response_url, snoozed.outcome, snoozed.links)
                if not result.success:
                    log.warning(
                        "Slack message update (snoozed) failed",
                        extra={"channel": name, "error": result.error},
                    )
                return

    return show


def telegram_webhooks(app: App) -> dict[str, http_telegram.TelegramWebhook]:
    """Each Telegram channel's secret token, and its bot answering a press."""
    webhooks = {}
    for name, config in app.channels_config.channels.items():
        channel = app.channels.get(name)
        if isinstance(config, TelegramConfig) and isinstance(channel, TelegramChannel):

            async def answer(callback_id: str, text: str, bot: TelegramChannel = channel) -> None:
                result = await bot.answer_callback(callback_id, text)
                if not result.success:
                    log.warning(
                        "answerCallbackQuery failed",
                        extra={"channel": bot.name, "error": result.error},
                    )

            webhooks[name] = http_telegram.TelegramWebhook(config.secret_token, answer)
    return webhooks


def routes(app: App) -> list[Any]:
    result: list[Any] = list(http_health.routes(app.ready))
    if app.links is not None:
        result += http_links.routes(app.links, lambda: app.public_url)
        channels = app.channels_config.channels
        result += http_integrations.routes(
            ProviderAnswers(app.store, app.acks, app.links, app.clock, app.snoozes),
            {
                name: c.signing_secret
                for name, c in channels.items()
                if isinstance(c, SlackConfig) and c.signing_secret
            },
            {
                name: c.webhook_secret
                for name, c in channels.items()
                if isinstance(c, PagerDutyConfig) and c.webhook_secret
            },
            _ephemeral_reply(app),
            _snoozed_reply(app),
        )
        result += http_telegram.routes(
            TelegramAnswers(app.store, app.acks, app.links, app.clock, app.snoozes),
            telegram_webhooks(app),
        )
        result += twilio_routes(app)
    result += http_console.routes(console(app))
    app.bridge = http_connect.Bridge(
        lambda: app.bridge_target,
        app.settings.max_receive_message_bytes,
        app.settings.http_request_timeout_seconds,
    )
    result += app.bridge.routes()
    result += http_alertmanager.routes(app.bridge)  # the gRPC methods, like the bridge
    result += http_heartbeats.routes(app.bridge)  # HeartbeatService.Beat, for curl
    return result


def twilio_routes(app: App) -> list[Any]:
    """Twilio's callbacks, verified with the auth token of each channel of the type."""
    assert app.links is not None
    accounts: dict[str, dict[str, http_twilio.TwilioAccount]] = {"sms": {}, "voice": {}}
    for name, c in app.channels_config.channels.items():
        if isinstance(c, TwilioSmsConfig | TwilioVoiceConfig):
            kind = "sms" if isinstance(c, TwilioSmsConfig) else "voice"
            accounts[kind][name] = http_twilio.TwilioAccount(
                c.account_sid, c.auth_token, c.from_number
            )
    answers = TwilioAnswers(app.store, app.acks, app.links, app.clock)
    return http_twilio.routes(answers, accounts["sms"], accounts["voice"], lambda: app.public_url)


def console(app: App) -> http_console.Console:
    """The operator console (/console/): the gRPC API's services, one more Watch
    on the same EventHub for its live views."""
    s = app.settings
    return http_console.Console(
        store=app.store,
        sessions=Sessions(
            app.store,
            app.authenticator,
            app.clock,
            idle=timedelta(minutes=s.console_session_idle_minutes),
            absolute=timedelta(hours=s.console_session_absolute_hours),
        ),
        queries=app.operator.queries,
        operations=app.operator.operations,
        acks=app.acks,
        policies=app.operator.policies,
        watch=app.watch,
        clock=app.clock,
        public_url=lambda: app.public_url,
        withdrawals=app.withdrawals,
        channels=app.channels.names(),
        people=app.operator.people,
        maintenance=app.operator.maintenance,
        heartbeats=app.heartbeats,
        endpoints={
            name: where
            for name, cfg in app.channels_config.channels.items()
            if (where := channel_endpoint(cfg))
        },
    )
