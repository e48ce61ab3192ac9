"""WatchEvents: a push-based, resumable, gap-free event stream.

- ``hub``: one ``EventHub`` per process reads each newly committed batch of events
  once and fans it out in memory through its index of subscriptions;
- ``subscription``: one stream's bounded queue, wake-up and heartbeat timer;
- ``items``: the shared per-event ``WatchItem``, a stream's ``WatchFilter``, ``StreamHeartbeat``;
- ``streams``: ``Watch.stream``, a stream's start cursor, catch-up and live tail;
- ``limits``: streams per principal and server-wide (TOO_MANY_STREAMS).

The names callers use are re-exported here.
"""

from uns_server.services.watch.hub import EventHub
from uns_server.services.watch.items import StreamHeartbeat, WatchFilter, WatchItem, payload_bytes
from uns_server.services.watch.limits import StreamLimits
from uns_server.services.watch.streams import NOTIFICATION_IDS_MAX, Watch
from uns_server.services.watch.subscription import Subscription

__all__ = [
    "NOTIFICATION_IDS_MAX",
    "EventHub",
    "StreamHeartbeat",
    "StreamLimits",
    "Subscription",
    "Watch",
    "WatchFilter",
    "WatchItem",
    "payload_bytes",
]
