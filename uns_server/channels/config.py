"""Channel configuration: where each named channel delivers, and with which credentials.

Credentials live here and only here (SPEC §2: never in payloads, events or logs). They
may be written inline or, better, as ``<option>_env: VARIABLE`` read from an injected
environment mapping; every config ``repr`` masks them, so a logged config is harmless.

Format (the mapping a YAML/JSON settings file holds, name -> options)::

    ops-webhook:
      type: webhook
      url: https://hooks.example.com/uns
      secret_env: UNS_OPS_WEBHOOK_SECRET      # "whsec_<base64>" or any raw string
      timeout_seconds: 10
      headers: {X-Team: ops}                  # static extra headers (values are secrets)
    alerts-slack:
      type: slack
      token_env: UNS_SLACK_BOT_TOKEN          # Web API chat.postMessage ...
      channel: "#alerts"
      signing_secret_env: UNS_SLACK_SIGNING_SECRET  # buttons answer in Slack (optional)
    legacy-slack:
      type: slack
      webhook_url_env: UNS_SLACK_WEBHOOK_URL  # ... or incoming-webhook mode
    oncall-mail:
      type: email
      host: smtp.example.com
      port: 587
      starttls: true
      username: uns
      password_env: UNS_SMTP_PASSWORD
      from: uns@example.com
      to: [oncall@example.com]
    pager:
      type: pagerduty
      routing_key_env: UNS_PD_ROUTING_KEY
      webhook_secret_env: UNS_PD_WEBHOOK_SECRET     # v3 webhooks settle acks (optional)
    phone-push:
      type: ntfy
      base_url: https://ntfy.sh               # a person's contact address is their topic
      token_env: UNS_NTFY_TOKEN               # access token, sent as Bearer (optional)
    ops-teams:
      type: teams
      url_env: UNS_TEAMS_WORKFLOW_URL         # a Teams Workflows webhook (channel-wide)
    oncall-telegram:
      type: telegram
      bot_token_env: UNS_TELEGRAM_BOT_TOKEN   # a person's contact address is a chat id
      secret_token_env: UNS_TELEGRAM_WEBHOOK_SECRET  # setWebhook's secret_token

``twilio_sms`` and ``twilio_voice`` are read by ``channels.twilio_config``.

A ``log`` channel named ``"log"`` is always present unless the file defines that name.
Unknown options are refused (a typo must not silently disable TLS or a header): each
channel's options are read and checked by ``channels.options.Options``.

Size: one config class and one builder per channel type, side by side, so that adding
a type adds to this one file rather than spreading over several.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, cast

from uns_server.channels import twilio_config as tw
from uns_server.channels._redact import MASK, endpoint, redact_url
from uns_server.channels._signing import signing_key
from uns_server.channels.options import ChannelConfigError, Options

__all__ = [
    "ChannelConfig",
    "ChannelConfigError",
    "ChannelsConfig",
    "EmailConfig",
    "LogConfig",
    "NtfyConfig",
    "PagerDutyConfig",
    "SlackConfig",
    "TeamsConfig",
    "TelegramConfig",
    "WebhookConfig",
    "channel_endpoint",
    "load_channels_config",
]

TIMEOUT_SECONDS_DEFAULT = 10.0
SMTP_TIMEOUT_SECONDS_DEFAULT = 30.0
SLACK_API_BASE_URL_DEFAULT = "https://slack.com/api"
PAGERDUTY_BASE_URL_DEFAULT = "https://events.pagerduty.com"
TELEGRAM_BASE_URL_DEFAULT = "https://api.telegram.org"
LOG_CHANNEL_NAME = "log"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TELEGRAM_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")


class _ReprHidesSecrets:
    """``repr`` that masks secret fields, URL paths and header values."""

    _secret_fields: ClassVar[frozenset[str]] = frozenset()
    _url_fields: ClassVar[frozenset[str]] = frozenset()
    _masked_value_fields: ClassVar[frozenset[str]] = frozenset()

    def __repr__(self) -> str:
        parts = []
        for f in fields(cast(Any, self)):
            value = getattr(self, f.name)
            if value and f.name in self._secret_fields:
                shown = repr(MASK)
            elif value and f.name in self._url_fields:
                shown = repr(redact_url(value))
            elif f.name in self._masked_value_fields:
                shown = repr({k: MASK for k in value})
            else:
                shown = repr(value)
            parts.append(f"{f.name}={shown}")
        return f"{type(self).__name__}({', '.join(parts)})"


@dataclass(frozen=True, repr=False)
class WebhookConfig(_ReprHidesSecrets):
    """Signed generic webhook (Standard Webhooks headers)."""

    type: ClassVar[str] = "webhook"
    _secret_fields = frozenset({"secret"})
    _url_fields = frozenset({"url"})
    _masked_value_fields = frozenset({"headers"})

    url: str
    secret: str
    """``whsec_<base64>`` (key = decoded bytes) or a raw string (key = its UTF-8 bytes)."""
    timeout_seconds: float = TIMEOUT_SECONDS_DEFAULT
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, repr=False)
class SlackConfig(_ReprHidesSecrets):
    """Slack, either Web API ``chat.postMessage`` (``token``) or an incoming webhook."""

    type: ClassVar[str] = "slack"
    _secret_fields = frozenset({"token", "webhook_url", "signing_secret"})
    _url_fields = frozenset({"base_url"})

    token: str | None = None
    channel: str | None = None
    webhook_url: str | None = None
    base_url: str = SLACK_API_BASE_URL_DEFAULT
    timeout_seconds: float = TIMEOUT_SECONDS_DEFAULT
    signing_secret: str | None = None
    """The Slack app's signing secret: with it (Web API mode) messages carry interactive
    buttons answered at ``/integrations/slack/interactions``; without, link buttons."""

    @property
    def uses_web_api(self) -> bool:
        return self.token is not None


@dataclass(frozen=True, repr=False)
class EmailConfig(_ReprHidesSecrets):
    """SMTP submission through aiosmtplib."""

    type: ClassVar[str] = "email"
    _secret_fields = frozenset({"password"})

    host: str
    from_addr: str
    to: tuple[str, ...]
    port: int | None = None
    """``None``: 465 with ``use_tls``, 587 with ``starttls``, else 25."""
    username: str | None = None
    password: str | None = None
    starttls: bool = False
    use_tls: bool = False
    validate_certs: bool = True
    ca_file: str | None = None
    local_hostname: str | None = None
    """EHLO name; set it to skip a reverse-DNS lookup of this host on every connect."""
    timeout_seconds: float = SMTP_TIMEOUT_SECONDS_DEFAULT
    allow_plaintext_auth: bool = False


@dataclass(frozen=True, repr=False)
class PagerDutyConfig(_ReprHidesSecrets):
    """PagerDuty Events API v2 (``POST {base_url}/v2/enqueue``)."""

    type: ClassVar[str] = "pagerduty"
    _secret_fields = frozenset({"routing_key", "webhook_secret"})
    _url_fields = frozenset({"base_url"})

    routing_key: str
    base_url: str = PAGERDUTY_BASE_URL_DEFAULT
    timeout_seconds: float = TIMEOUT_SECONDS_DEFAULT
    webhook_secret: str | None = None
    """The secret of the PagerDuty v3 webhook subscription that posts to
    ``/integrations/pagerduty/webhook`` (incident acknowledged/resolved settle the ack)."""
    resolve_on_timeout: bool = False
    """Resolve the incidents also when the ack times out. By default they stay open: a
    timeout means escalation is required, which PagerDuty's own escalation carries on."""


@dataclass(frozen=True, repr=False)
class NtfyConfig(_ReprHidesSecrets):
    """ntfy push (``POST {base_url}`` JSON publish); a person's contact is their topic."""

    type: ClassVar[str] = "ntfy"
    _secret_fields = frozenset({"token"})
    _url_fields = frozenset({"base_url"})

    base_url: str
    token: str | None = None
    """An ntfy access token (``tk_...``), sent as ``Authorization: Bearer``."""
    timeout_seconds: float = TIMEOUT_SECONDS_DEFAULT


@dataclass(frozen=True, repr=False)
class TeamsConfig(_ReprHidesSecrets):
    """Microsoft Teams through a Workflows webhook (an Adaptive Card), channel-wide."""

    type: ClassVar[str] = "teams"
    _secret_fields = frozenset({"url"})  # the workflow URL carries its signature (sig=)

    url: str
    timeout_seconds: float = TIMEOUT_SECONDS_DEFAULT


@dataclass(frozen=True, repr=False)
class TelegramConfig(_ReprHidesSecrets):
    """Telegram Bot API (``POST {base_url}/bot{bot_token}/sendMessage``); a person's
    contact is a chat id. Buttons answer at ``/integrations/telegram/{channel name}``,
    verified by the ``secret_token`` given to ``setWebhook``."""

    type: ClassVar[str] = "telegram"
    _secret_fields = frozenset({"bot_token", "secret_token"})
    _url_fields = frozenset({"base_url"})

    bot_token: str
    secret_token: str
    base_url: str = TELEGRAM_BASE_URL_DEFAULT
    timeout_seconds: float = TIMEOUT_SECONDS_DEFAULT


@dataclass(frozen=True, repr=False)
class LogConfig(_ReprHidesSecrets):
    """Local ``logging`` channel (logger ``uns.channels.log``); always delivers."""

    type: ClassVar[str] = "log"

    level: str = "INFO"


ChannelConfig = (
    WebhookConfig
    | SlackConfig
    | EmailConfig
    | PagerDutyConfig
    | NtfyConfig
    | TeamsConfig
    | TelegramConfig
    | tw.TwilioSmsConfig
    | tw.TwilioVoiceConfig
    | LogConfig
)


def channel_endpoint(config: ChannelConfig) -> str:
    """``host:port`` of the provider a channel calls ("" for ``log``): no path, query,
    user, token or key (``_redact.endpoint``)."""
    if isinstance(config, WebhookConfig):
        return endpoint(config.url)
    if isinstance(config, SlackConfig):
        return endpoint(config.webhook_url or config.base_url)
    if isinstance(
        config, PagerDutyConfig | TelegramConfig | tw.TwilioSmsConfig | tw.TwilioVoiceConfig
    ):
        return endpoint(config.base_url)
    if isinstance(config, EmailConfig):
        # aiosmtplib's default port when none is set.
        port = config.port or (465 if config.use_tls else 587 if config.starttls else 25)
        return endpoint(config.host, port)
    return ""


@dataclass(frozen=True)
class ChannelsConfig:
    """Every configured channel by name."""

    channels: Mapping[str, ChannelConfig]
    # Each channel's ``type:`` as written (templates are chosen by it, SPEC §7).
    types: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", MappingProxyType(dict(self.channels)))
        object.__setattr__(self, "types", MappingProxyType(dict(self.types)))


def _webhook(o: Options) -> WebhookConfig:
    config = WebhookConfig(
        url=o.url("url", secret=True),
        secret=o.secret("secret"),
        timeout_seconds=o.seconds("timeout_seconds", TIMEOUT_SECONDS_DEFAULT),
        headers=o.headers("headers", "headers_env"),
    )
    try:
        signing_key(config.secret)
    except ValueError as exc:
        raise o.fail(f"option 'secret': {exc}") from None
    return config


def _slack(o: Options) -> SlackConfig:
    config = SlackConfig(
        token=o.secret("token", default=None),
        channel=o.text("channel", None),
        webhook_url=o.url("webhook_url", secret=True, default=None),
        base_url=o.url("base_url", default=SLACK_API_BASE_URL_DEFAULT).rstrip("/"),
        timeout_seconds=o.seconds("timeout_seconds", TIMEOUT_SECONDS_DEFAULT),
        signing_secret=o.secret("signing_secret", default=None),
    )
    if config.signing_secret is not None and config.token is None:
        raise o.fail("'signing_secret' (interactive buttons) needs Web API mode ('token')")
    if (config.token is None) == (config.webhook_url is None):
        raise o.fail("set exactly one of 'token' (Web API) or 'webhook_url' (incoming webhook)")
    if config.token is not None and config.channel is None:
        raise o.fail("Web API mode needs 'channel'")
    if config.webhook_url is not None and config.channel is not None:
        raise o.fail("an incoming webhook posts to its own channel; drop 'channel'")
    return config


def _email(o: Options) -> EmailConfig:
    config = EmailConfig(
        host=o.text("host"),
        port=o.integer("port", None),
        username=o.text("username", None),
        password=o.secret("password", default=None),
        starttls=o.flag("starttls", False),
        use_tls=o.flag("use_tls", False),
        validate_certs=o.flag("validate_certs", True),
        ca_file=o.text("ca_file", None),
        local_hostname=o.text("local_hostname", None),
        from_addr=o.text("from"),
        to=o.addresses("to"),
        timeout_seconds=o.seconds("timeout_seconds", SMTP_TIMEOUT_SECONDS_DEFAULT),
        allow_plaintext_auth=o.flag("allow_plaintext_auth", False),
    )
    if "@" not in config.from_addr or any(c in config.from_addr for c in "\r\n"):
        raise o.fail("option 'from' must be one email address")
    if config.port is not None and not 0 < config.port < 65536:
        raise o.fail("option 'port' must be a TCP port")
    if config.starttls and config.use_tls:
        raise o.fail("'starttls' and 'use_tls' are mutually exclusive")
    if (config.username is None) != (config.password is None):
        raise o.fail("'username' and 'password' go together")
    encrypted = config.starttls or config.use_tls
    if config.password is not None and not encrypted and not config.allow_plaintext_auth:
        raise o.fail("refusing to send the SMTP password unencrypted: set 'starttls' or 'use_tls'")
    return config


def _pagerduty(o: Options) -> PagerDutyConfig:
    return PagerDutyConfig(
        routing_key=o.secret("routing_key"),
        base_url=o.url("base_url", default=PAGERDUTY_BASE_URL_DEFAULT).rstrip("/"),
        timeout_seconds=o.seconds("timeout_seconds", TIMEOUT_SECONDS_DEFAULT),
        webhook_secret=o.secret("webhook_secret", default=None),
        resolve_on_timeout=o.flag("resolve_on_timeout", False),
    )


def _ntfy(o: Options) -> NtfyConfig:
    return NtfyConfig(
        base_url=o.url("base_url").rstrip("/"),
        token=o.secret("token", default=None),
        timeout_seconds=o.seconds("timeout_seconds", TIMEOUT_SECONDS_DEFAULT),
    )


def _teams(o: Options) -> TeamsConfig:
    return TeamsConfig(
        url=o.url("url", secret=True),
        timeout_seconds=o.seconds("timeout_seconds", TIMEOUT_SECONDS_DEFAULT),
    )


def _telegram(o: Options) -> TelegramConfig:
    config = TelegramConfig(
        bot_token=o.secret("bot_token"),
        secret_token=o.secret("secret_token"),
        base_url=o.url("base_url", default=TELEGRAM_BASE_URL_DEFAULT).rstrip("/"),
        timeout_seconds=o.seconds("timeout_seconds", TIMEOUT_SECONDS_DEFAULT),
    )
    if not _TELEGRAM_SECRET_RE.fullmatch(config.secret_token):
        # What setWebhook accepts; Telegram refuses any other secret_token.
        raise o.fail("option 'secret_token' must be 1-256 of A-Z, a-z, 0-9, '_' and '-'")
    return config


def _log(o: Options) -> LogConfig:
    level = o.text("level", "INFO").upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise o.fail("option 'level' must be a logging level name")
    return LogConfig(level=level)


_BUILDERS: Mapping[str, Callable[[Options], ChannelConfig]] = {
    "webhook": _webhook,
    "slack": _slack,
    "email": _email,
    "pagerduty": _pagerduty,
    "ntfy": _ntfy,
    "teams": _teams,
    "telegram": _telegram,
    "twilio_sms": tw.twilio_sms,
    "twilio_voice": tw.twilio_voice,
    "log": _log,
}


def load_channels_config(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> ChannelsConfig:
    """Validate ``{name: {"type": ..., **options}}`` into typed configs.

    ``environ`` resolves ``*_env`` options (pass ``os.environ`` in production; tests pass
    a dict). Error messages name channels, options and variables, never secret values.
    """
    if not isinstance(data, Mapping):
        raise ChannelConfigError("channels configuration must be a mapping of name -> options")
    channels: dict[str, ChannelConfig] = {}
    types: dict[str, str] = {LOG_CHANNEL_NAME: "log"}
    for name, raw in data.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ChannelConfigError(f"invalid channel name {name!r}")
        if not isinstance(raw, Mapping):
            raise ChannelConfigError(f"channel {name!r}: options must be a mapping")
        kind = raw.get("type")
        builder = _BUILDERS.get(kind) if isinstance(kind, str) else None
        if builder is None:
            raise ChannelConfigError(
                f"channel {name!r}: 'type' must be one of {', '.join(sorted(_BUILDERS))}"
            )
        options = Options(name, raw, environ)
        channels[name] = builder(options)
        types[name] = str(kind)
        options.finish()
    channels.setdefault(LOG_CHANNEL_NAME, LogConfig())
    return ChannelsConfig(channels, types)
