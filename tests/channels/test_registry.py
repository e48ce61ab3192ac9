"""Building channels from configuration and owning the shared HTTP client."""

from __future__ import annotations

import pytest

from tests.channels.conftest import PLANTED_SECRET, make_message
from tests.support.http_receiver import HttpReceiver, Reply
from uns_server.channels import (
    ChannelRegistry,
    UnknownChannel,
    build_channels,
    load_channels_config,
)
from uns_server.channels.base import Channel
from uns_server.channels.email import EmailChannel
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.log import LogChannel
from uns_server.channels.pagerduty import PagerDutyChannel
from uns_server.channels.slack import SlackChannel
from uns_server.channels.webhook import WebhookChannel


def _config(rx: HttpReceiver) -> dict[str, object]:
    return {
        "hook": {"type": "webhook", "url": rx.url("/hook"), "secret": PLANTED_SECRET},
        "slack": {
            "type": "slack",
            "token": PLANTED_SECRET,
            "channel": "C1",
            "base_url": rx.url("/api"),
        },
        "pager": {"type": "pagerduty", "routing_key": PLANTED_SECRET, "base_url": rx.url("")},
        "mail": {
            "type": "email",
            "host": "127.0.0.1",
            "from": "a@example.com",
            "to": "b@example.com",
        },
    }


async def test_every_type_is_built_and_satisfies_the_protocol(receiver: HttpReceiver) -> None:
    async with ChannelRegistry.from_config(load_channels_config(_config(receiver))) as registry:
        assert registry.names() == ("hook", "log", "mail", "pager", "slack")
        kinds = {name: type(registry.get(name)) for name in registry}
        assert kinds == {
            "hook": WebhookChannel,
            "log": LogChannel,
            "mail": EmailChannel,
            "pager": PagerDutyChannel,
            "slack": SlackChannel,
        }
        for name in registry:
            channel = registry.get(name)
            assert isinstance(channel, Channel) and channel.name == name
        assert "hook" in registry and "nope" not in registry
        with pytest.raises(UnknownChannel):
            registry.get("nope")


async def test_channels_share_one_client_and_close_it_when_it_is_theirs(
    receiver: HttpReceiver,
) -> None:
    receiver.script(Reply.json({"received": True}), Reply.json({"ok": True, "ts": "1.2"}))
    registry = ChannelRegistry.from_config(load_channels_config(_config(receiver)))
    hook, slack = registry.get("hook"), registry.get("slack")
    assert isinstance(hook, WebhookChannel) and isinstance(slack, SlackChannel)
    client = hook._client
    assert slack._client is client and not client.is_closed
    assert (await hook.send(make_message())).success
    assert (await slack.send(make_message())).success
    await hook.aclose()
    assert not client.is_closed  # slack and pager still use it
    await registry.aclose()
    assert client.is_closed
    await registry.aclose()  # idempotent


async def test_an_injected_client_stays_open(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    channels = build_channels(load_channels_config(_config(receiver)), http_client)
    hook = channels["hook"]
    assert isinstance(hook, WebhookChannel) and hook._client is http_client
    await ChannelRegistry(channels).aclose()
    assert not http_client.is_closed


async def test_no_http_client_is_made_without_http_channels() -> None:
    channels = build_channels(load_channels_config({}))
    assert list(channels) == ["log"]
    assert (await channels["log"].send(make_message())).success
