"""Loading channel configuration: types, secrets from the environment, masked reprs."""

from __future__ import annotations

import base64

import pytest

from tests.channels.conftest import PLANTED_SECRET
from uns_server.channels.config import (
    ChannelConfigError,
    EmailConfig,
    LogConfig,
    PagerDutyConfig,
    SlackConfig,
    WebhookConfig,
    channel_endpoint,
    load_channels_config,
)

ENV = {
    "HOOK_SECRET": PLANTED_SECRET,
    "SLACK_TOKEN": PLANTED_SECRET,
    "SMTP_PASSWORD": PLANTED_SECRET,
    "PD_KEY": PLANTED_SECRET,
    "SLACK_URL": f"https://hooks.slack.com/services/T/B/{PLANTED_SECRET}",
    "API_KEY": PLANTED_SECRET,
}

FULL = {
    "ops-webhook": {
        "type": "webhook",
        "url": "https://hooks.example.com/uns",
        "secret_env": "HOOK_SECRET",
        "timeout_seconds": 5,
        "headers": {"X-Team": "ops"},
        "headers_env": {"X-Api-Key": "API_KEY"},
    },
    "alerts-slack": {"type": "slack", "token_env": "SLACK_TOKEN", "channel": "C0ALERTS"},
    "legacy-slack": {"type": "slack", "webhook_url_env": "SLACK_URL"},
    "oncall-mail": {
        "type": "email",
        "host": "smtp.example.com",
        "port": 587,
        "starttls": True,
        "username": "uns",
        "password_env": "SMTP_PASSWORD",
        "from": "UNS <uns@example.com>",
        "to": ["a@example.com", "b@example.com"],
    },
    "pager": {"type": "pagerduty", "routing_key_env": "PD_KEY"},
}


def test_full_example_loads_with_defaults() -> None:
    config = load_channels_config(FULL, environ=ENV)
    channels = config.channels
    assert set(channels) == {*FULL, "log"}
    hook = channels["ops-webhook"]
    assert isinstance(hook, WebhookConfig)
    assert hook.secret == PLANTED_SECRET and hook.timeout_seconds == 5.0
    assert dict(hook.headers) == {"X-Team": "ops", "X-Api-Key": PLANTED_SECRET}
    slack = channels["alerts-slack"]
    assert isinstance(slack, SlackConfig) and slack.uses_web_api
    assert slack.base_url == "https://slack.com/api"
    legacy = channels["legacy-slack"]
    assert isinstance(legacy, SlackConfig) and not legacy.uses_web_api
    mail = channels["oncall-mail"]
    assert isinstance(mail, EmailConfig)
    assert mail.to == ("a@example.com", "b@example.com") and mail.starttls and not mail.use_tls
    pager = channels["pager"]
    assert isinstance(pager, PagerDutyConfig) and pager.base_url == "https://events.pagerduty.com"
    assert channels["log"] == LogConfig()


def test_reprs_hide_every_secret() -> None:
    config = load_channels_config(FULL, environ=ENV)
    for channel in config.channels.values():
        assert PLANTED_SECRET not in repr(channel)
        assert PLANTED_SECRET not in str(channel)
    assert "secret='***'" in repr(config.channels["ops-webhook"])
    assert "https://hooks.example.com/***" in repr(config.channels["ops-webhook"])
    assert PLANTED_SECRET not in repr(config)


def test_inline_secrets_and_whsec_form_are_accepted() -> None:
    whsec = "whsec_" + base64.b64encode(b"k" * 24).decode()
    config = load_channels_config(
        {"h": {"type": "webhook", "url": "http://127.0.0.1/h", "secret": whsec}}
    )
    hook = config.channels["h"]
    assert isinstance(hook, WebhookConfig) and hook.secret == whsec


def test_log_channel_can_be_overridden() -> None:
    config = load_channels_config({"log": {"type": "log", "level": "debug"}})
    assert config.channels == {"log": LogConfig(level="DEBUG")}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"x": {"type": "carrier-pigeon"}}, "'type' must be one of"),
        ({"x": "webhook"}, "options must be a mapping"),
        ({"bad name!": {"type": "log"}}, "invalid channel name"),
        ({"x": {"type": "webhook", "url": "https://h"}}, "'secret' is required"),
        ({"x": {"type": "webhook", "url": "ftp://h", "secret": "s"}}, "http(s) URL"),
        ({"x": {"type": "webhook", "url": "https://h", "secret": "whsec_!!"}}, "not valid base64"),
        (
            {
                "x": {
                    "type": "webhook",
                    "url": "https://h",
                    "secret": "s",
                    "secret_env": "HOOK_SECRET",
                }
            },
            "not both",
        ),
        ({"x": {"type": "webhook", "url": "https://h", "secret_env": "MISSING"}}, "'MISSING'"),
        (
            {"x": {"type": "webhook", "url": "https://h", "secret": "s", "timeout": 3}},
            "did you mean 'timeout_seconds'",
        ),
        (
            {"x": {"type": "webhook", "url": "https://h", "secret": "s", "timeout_seconds": 0}},
            "(0, 300]",
        ),
        (
            {
                "x": {
                    "type": "webhook",
                    "url": "https://h",
                    "secret": "s",
                    "headers": {"webhook-id": "1"},
                }
            },
            "set by the adapter",
        ),
        (
            {
                "x": {
                    "type": "webhook",
                    "url": "https://h",
                    "secret": "s",
                    "headers": {"X": "a\r\nB: c"},
                }
            },
            "single-line",
        ),
        ({"x": {"type": "slack", "channel": "C1"}}, "exactly one of"),
        ({"x": {"type": "slack", "token": "t"}}, "needs 'channel'"),
        ({"x": {"type": "slack", "webhook_url": "https://h/x", "channel": "C1"}}, "drop 'channel'"),
        ({"x": {"type": "email", "host": "h", "from": "a@b", "to": []}}, "at least one"),
        ({"x": {"type": "email", "host": "h", "from": "nobody", "to": "a@b"}}, "one email address"),
        (
            {
                "x": {
                    "type": "email",
                    "host": "h",
                    "from": "a@b",
                    "to": "c@d",
                    "starttls": True,
                    "use_tls": True,
                }
            },
            "mutually exclusive",
        ),
        (
            {"x": {"type": "email", "host": "h", "from": "a@b", "to": "c@d", "password": "p"}},
            "go together",
        ),
        (
            {
                "x": {
                    "type": "email",
                    "host": "h",
                    "from": "a@b",
                    "to": "c@d",
                    "username": "u",
                    "password": "p",
                }
            },
            "unencrypted",
        ),
        (
            {"x": {"type": "email", "host": "h", "from": "a@b", "to": "c@d", "port": "25"}},
            "an integer",
        ),
        (
            {"x": {"type": "email", "host": "h", "from": "a@b", "to": "c@d", "starttls": "yes"}},
            "true or false",
        ),
        ({"x": {"type": "pagerduty"}}, "'routing_key' is required"),
        ({"x": {"type": "log", "level": "LOUD"}}, "logging level"),
    ],
)
def test_invalid_configuration_is_refused_with_a_precise_message(
    data: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ChannelConfigError) as info:
        load_channels_config(data, environ=ENV)
    assert fragment in str(info.value)
    assert PLANTED_SECRET not in str(info.value)


def test_env_options_need_an_environment() -> None:
    with pytest.raises(ChannelConfigError, match="needs an environment"):
        load_channels_config({"p": {"type": "pagerduty", "routing_key_env": "PD_KEY"}})


def test_plaintext_auth_needs_an_explicit_opt_in() -> None:
    config = load_channels_config(
        {
            "m": {
                "type": "email",
                "host": "localhost",
                "from": "a@b",
                "to": "c@d",
                "username": "u",
                "password": "p",
                "allow_plaintext_auth": True,
            }
        }
    )
    assert isinstance(config.channels["m"], EmailConfig)


def test_a_channels_endpoint_is_its_host_and_port_and_nothing_secret() -> None:
    """What the console shows an operator of each channel (docs/console.md)."""
    secret_url = f"https://user:{PLANTED_SECRET}@hooks.example.com:8443/t/{PLANTED_SECRET}?k=1"
    config = load_channels_config(
        {**FULL, "hook-with-token": {"type": "webhook", "url": secret_url, "secret": "s3"}},
        environ=ENV,
    )
    endpoints = {name: channel_endpoint(c) for name, c in config.channels.items()}
    assert endpoints == {
        "ops-webhook": "hooks.example.com:443",
        "hook-with-token": "hooks.example.com:8443",
        "alerts-slack": "slack.com:443",
        "legacy-slack": "hooks.slack.com:443",
        "oncall-mail": "smtp.example.com:587",
        "pager": "events.pagerduty.com:443",
        "log": "",  # built in: no provider
    }
    assert channel_endpoint(EmailConfig(host="::1", from_addr="a@b.c", to=("d@e.f",))) == (
        "[::1]:25"
    )
