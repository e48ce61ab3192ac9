"""What each configured channel can address a person on (``Contact.address``, SPEC §6)."""

from __future__ import annotations

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
from uns_server.channels.twilio_config import TwilioSmsConfig, TwilioVoiceConfig
from uns_server.domain.people import ChannelKind


def person_kinds(config: ChannelsConfig) -> dict[str, ChannelKind]:
    """Channel name to the kind of address a person's contact on it must have."""
    kinds: dict[str, ChannelKind] = {}
    for name, cfg in config.channels.items():
        if isinstance(cfg, EmailConfig):
            kinds[name] = ChannelKind.EMAIL
        elif isinstance(cfg, SlackConfig):
            kinds[name] = (
                ChannelKind.SLACK_WEB_API if cfg.uses_web_api else ChannelKind.SLACK_WEBHOOK
            )
        elif isinstance(cfg, PagerDutyConfig):
            kinds[name] = ChannelKind.PAGERDUTY
        elif isinstance(cfg, NtfyConfig):
            kinds[name] = ChannelKind.NTFY
        elif isinstance(cfg, TeamsConfig):
            kinds[name] = ChannelKind.TEAMS
        elif isinstance(cfg, TelegramConfig):
            kinds[name] = ChannelKind.TELEGRAM
        elif isinstance(cfg, TwilioSmsConfig | TwilioVoiceConfig):
            kinds[name] = ChannelKind.PHONE
        elif isinstance(cfg, WebhookConfig):
            kinds[name] = ChannelKind.WEBHOOK
        else:
            assert isinstance(cfg, LogConfig)
            kinds[name] = ChannelKind.LOG
    return kinds
