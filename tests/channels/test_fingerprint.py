"""The channel configuration fingerprint: equal for equal channel names and types,
different when a channel is added, removed or changes type, blind to secrets."""

from __future__ import annotations

from typing import Any

from uns_server.channels.config import load_channels_config
from uns_server.channels.fingerprint import channel_fingerprint


def fingerprint(data: dict[str, Any]) -> str:
    return channel_fingerprint(load_channels_config(data, {}))


HOOK = {"type": "webhook", "url": "https://hooks.example.com/a", "secret": "s1"}


def test_same_channels_same_fingerprint_whatever_the_secrets_or_order() -> None:
    rotated = {**HOOK, "url": "https://hooks.example.com/b", "secret": "s2"}
    assert fingerprint({"ops": HOOK, "log": {"type": "log"}}) == fingerprint(
        {"log": {"type": "log"}, "ops": rotated}
    )


def test_an_added_removed_or_retyped_channel_changes_it() -> None:
    base = fingerprint({"ops": HOOK})
    assert fingerprint({}) != base  # only the implicit ``log`` channel
    assert fingerprint({"ops": HOOK, "ops2": HOOK}) != base
    assert fingerprint({"ops": {"type": "log"}}) != base
    assert fingerprint({"other": HOOK}) != base
