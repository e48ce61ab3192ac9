"""Delivery adapters behind one interface (SPEC §2 "Channels").

Each adapter reports *whether* the provider explicitly accepted a message and, if not,
whether a retry may help (and the provider's Retry-After); the dispatch worker and the
domain retry schedule decide *when*. See :mod:`uns_server.channels.base` for the rules.
"""

from uns_server.channels.base import Channel, ChannelResult, OutboundMessage
from uns_server.channels.config import ChannelConfigError, ChannelsConfig, load_channels_config
from uns_server.channels.registry import ChannelRegistry, UnknownChannel, build_channels

__all__ = [
    "Channel",
    "ChannelConfigError",
    "ChannelRegistry",
    "ChannelResult",
    "ChannelsConfig",
    "OutboundMessage",
    "UnknownChannel",
    "build_channels",
    "load_channels_config",
]
