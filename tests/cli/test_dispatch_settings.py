"""The channel-isolation settings (issue 41 item 2): read from the environment like
every setting, refused when they cannot work."""

from __future__ import annotations

import re

import pytest

from uns_server.settings import (
    DISPATCH_CHANNEL_CONCURRENCY_DEFAULT,
    DISPATCH_MAX_THROTTLE_DEFERRALS_DEFAULT,
    Settings,
    SettingsError,
)


def test_defaults_and_environment() -> None:
    default = Settings.from_env({})
    assert default.dispatch_channel_concurrency == DISPATCH_CHANNEL_CONCURRENCY_DEFAULT == 16
    assert default.dispatch_max_throttle_deferrals == DISPATCH_MAX_THROTTLE_DEFERRALS_DEFAULT
    # A hanging channel leaves the others half of the default slots.
    assert default.dispatch_concurrency - default.dispatch_channel_concurrency == 16
    env = {"UNS_DISPATCH_CHANNEL_CONCURRENCY": "4", "UNS_DISPATCH_MAX_THROTTLE_DEFERRALS": "0"}
    given = Settings.from_env(env)
    assert (given.dispatch_channel_concurrency, given.dispatch_max_throttle_deferrals) == (4, 0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dispatch_channel_concurrency": 0}, "dispatch_channel_concurrency must be at least 1"),
        (
            {"dispatch_max_throttle_deferrals": -1},
            "dispatch_max_throttle_deferrals must not be negative",
        ),
    ],
)
def test_settings_refuse_what_cannot_work(overrides: dict[str, int], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        Settings.from_env({}, **overrides)
