"""Bulkheads: at most ``limit`` provider calls per channel in flight in this process
(issue 41 item 2), so a channel whose provider hangs or crawls cannot take every
delivery slot from the others.

A channel's count covers a delivery from its admission (a claim, or intake's hand-over)
until that channel's provider call returns; a fast channel's count falls back at once,
a hanging one's stays up. Three places read it:

- the claim (``Dispatcher.claim``) takes only leaders every one of whose channels has
  room (``open``), so work naming a full channel stays unleased in the table (no lease
  runs out while it waits; another replica with room may take it), and claims no more
  rows than the roomiest channel can take (``room``);
- intake hands a new leader over only when its channels have room (``has_room``);
- a delivery admitted anyway (a batch that named one channel more often than it had
  room, a hand-over racing another, a person's route known only at send time) does not
  call a full channel: ``enter`` refuses it, and the channel's answer is *busy*, a
  deferral the domain settles without spending an attempt (``lifecycle``).

The lease is never spent waiting: nothing here blocks, a full channel is passed over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class Bulkheads:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a bulkhead holds at least 1 call, got {limit}")
        self.limit = limit
        self._busy: Counter[str] = Counter()

    def busy(self, channel: str) -> int:
        """Provider calls of ``channel`` admitted and not yet returned."""
        return self._busy[channel]

    def room(self, channel: str) -> int:
        return max(0, self.limit - self._busy[channel])

    def has_room(self, channels: Iterable[str]) -> bool:
        return all(self._busy[ch] < self.limit for ch in channels)

    def open(self, channels: Iterable[str]) -> list[str]:
        """Of ``channels``, those with room for one more call."""
        return [ch for ch in channels if self._busy[ch] < self.limit]

    def enter(self, channel: str) -> bool:
        """Take one of the channel's places; False (nothing taken) when it is full."""
        if self._busy[channel] >= self.limit:
            return False
        self._busy[channel] += 1
        return True

    def leave(self, channel: str) -> None:
        """Give back a place ``enter`` took."""
        left = self._busy[channel] - 1
        if left > 0:
            self._busy[channel] = left
        else:
            del self._busy[channel]
