"""Building channels from configuration, and the registry the dispatch worker looks them up in.

All HTTP adapters share one ``OutboundClient`` (one connection pool, one set of limits).
Whoever passes a client in keeps owning it; a client created here is closed when the last
channel using it is closed (``ChannelRegistry.aclose`` closes them all).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import TracebackType

from uns_server.channels._http import ClientLease
from uns_server.channels.base import Channel
from uns_server.channels.config import (
    ChannelsConfig,
    EmailConfig,
    LogConfig,
    NtfyConfig,
    PagerDutyConfig,
    SlackConfig,
    TeamsConfig,
    TelegramConfig,
    WebhookConfig,
)
from uns_server.channels.email import EmailChannel
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.log import LogChannel
from uns_server.channels.ntfy import NtfyChannel
from uns_server.channels.pagerduty import PagerDutyChannel
from uns_server.channels.slack import SlackChannel
from uns_server.channels.teams import TeamsChannel
from uns_server.channels.telegram import TelegramChannel
from uns_server.channels.twilio import TwilioSmsChannel
from uns_server.channels.twilio_config import TwilioSmsConfig, TwilioVoiceConfig
from uns_server.channels.twilio_voice import TwilioVoiceChannel
from uns_server.channels.webhook import WebhookChannel

HTTP_MAX_CONNECTIONS_DEFAULT = 100
HTTP_KEEPALIVE_EXPIRY_SECONDS_DEFAULT = 30.0


def default_http_client(*, trust_env: bool = True) -> OutboundClient:
    """The shared client: bounded pool, no redirects (a signed body stays where it was
    sent), no cookies. Every request carries its adapter's timeout. ``trust_env=False``
    ignores proxy variables and ``.netrc`` (tests on loopback)."""
    return OutboundClient(
        max_connections=HTTP_MAX_CONNECTIONS_DEFAULT,
        keepalive_expiry_seconds=HTTP_KEEPALIVE_EXPIRY_SECONDS_DEFAULT,
        headers={"user-agent": "uns-server"},
        trust_env=trust_env,
    )


def build_channels(
    config: ChannelsConfig, http_client: OutboundClient | None = None
) -> dict[str, Channel]:
    """One adapter per configured channel, keyed by name."""
    http_configs: tuple[type, ...] = (WebhookConfig, SlackConfig, PagerDutyConfig, NtfyConfig)
    http_configs += (TeamsConfig, TelegramConfig, TwilioSmsConfig, TwilioVoiceConfig)
    lease: ClientLease | None = None
    if any(isinstance(c, http_configs) for c in config.channels.values()):
        lease = ClientLease(http_client or default_http_client(), owned=http_client is None)
    channels: dict[str, Channel] = {}
    for name, cfg in config.channels.items():
        if isinstance(cfg, LogConfig):
            channels[name] = LogChannel(name, cfg)
        elif isinstance(cfg, EmailConfig):
            channels[name] = EmailChannel(name, cfg)
        else:
            assert lease is not None
            if isinstance(cfg, WebhookConfig):
                channels[name] = WebhookChannel(name, cfg, lease.client, on_close=lease.acquire())
            elif isinstance(cfg, SlackConfig):
                channels[name] = SlackChannel(name, cfg, lease.client, on_close=lease.acquire())
            elif isinstance(cfg, NtfyConfig):
                channels[name] = NtfyChannel(name, cfg, lease.client, on_close=lease.acquire())
            elif isinstance(cfg, TeamsConfig):
                channels[name] = TeamsChannel(name, cfg, lease.client, on_close=lease.acquire())
            elif isinstance(cfg, TelegramConfig):
                channels[name] = TelegramChannel(name, cfg, lease.client, on_close=lease.acquire())
            elif isinstance(cfg, TwilioSmsConfig):
                channels[name] = TwilioSmsChannel(name, cfg, lease.client, on_close=lease.acquire())
            elif isinstance(cfg, TwilioVoiceConfig):
                channels[name] = TwilioVoiceChannel(
                    name, cfg, lease.client, on_close=lease.acquire()
                )
            else:
                channels[name] = PagerDutyChannel(name, cfg, lease.client, on_close=lease.acquire())
    return channels


class UnknownChannel(KeyError):
    """No channel is configured under this name."""


class ChannelRegistry:
    """The configured channels by name; closing it closes every adapter."""

    def __init__(
        self, channels: Mapping[str, Channel], types: Mapping[str, str] | None = None
    ) -> None:
        self._channels = dict(channels)
        self._types = dict(types or {})

    @classmethod
    def from_config(
        cls, config: ChannelsConfig, http_client: OutboundClient | None = None
    ) -> ChannelRegistry:
        return cls(build_channels(config, http_client), config.types)

    def type_of(self, name: str) -> str:
        """The channel's ``type:`` ("email", "slack", ...); "" when not known."""
        return self._types.get(name, "")

    def get(self, name: str) -> Channel:
        """The channel called ``name``; :class:`UnknownChannel` if there is none."""
        try:
            return self._channels[name]
        except KeyError:
            raise UnknownChannel(name) from None

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._channels))

    def __contains__(self, name: object) -> bool:
        return name in self._channels

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    async def aclose(self) -> None:
        """Close every adapter, even if one of them fails; re-raise the first failure."""
        first: BaseException | None = None
        for channel in self._channels.values():
            try:
                await channel.aclose()
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    async def __aenter__(self) -> ChannelRegistry:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
