"""Dispatch: deliver every accepted obligation at least once (seed 000 §1.1, seeds 003/004).

One attempt, as three steps:

1. **Claim** (one transaction per batch): lock due leaders (SKIP LOCKED), give each
   a lease and a fencing token, and commit ATTEMPT_STARTED plus one
   CHANNEL_ATTEMPT_STARTED per channel *before* any provider I/O. A row whose
   previous lease expired unsettled is flagged ``provider_effect_may_have_occurred``;
   if that interrupted attempt was the cycle's last, the row is not attempted again
   but settled FAILED right there, as an exhausted retry would be
   (``domain.lifecycle.decide_claim``).
   A leader accepted while this process has free slots skips this step: intake's
   transaction inserts it leased, with the same events (``reserve``, ``lease_new``,
   ``hand_over``), and hands the claim over after its commit.
2. **Send** outside any transaction, only to channels not yet delivered in this
   cycle (a retry never re-sends to a channel that already accepted).
3. **Settle** (one transaction): always append the CHANNEL_ATTEMPT_RESULT events;
   then, only if the lease is still ours, move the row as
   ``domain.lifecycle.decide_settlement`` decides: DELIVERED (+ ack PENDING,
   followers DEDUPLICATED), PENDING again with backoff, or FAILED (dead-lettered for
   GUARANTEED, followers promoted / relinked, or the obligation handed off to a newer
   active owner of the dedup key: ``domain.lifecycle.decide_hand_off``). A lost
   lease records LEASE_LOST instead and changes nothing else.

Channels are isolated by bulkheads (``bulkheads``): at most
``dispatch_channel_concurrency`` provider calls of one channel in flight per process.
The claim takes only leaders whose channels all have room (the others wait unleased),
and a channel admitted over its limit is not called but answered *busy*. Busy channels
and a provider's 429 (*throttled*) defer the attempt without spending it
(``domain.lifecycle.decide_settlement``).

Settlements are batched: deliveries that finish while a settle transaction is in
flight are settled together in the next one (one row lock query, one executemany
per kind of update, one audit insert, one events append). Fencing stays per row:
a row whose lease was lost gets LEASE_LOST while the others in the batch settle.

The modules, one concern each:

- ``bulkheads``: provider calls in flight per channel, and which channels have room;
- ``claims``: the values a claim hands a delivery (``Claim``, ``ChannelAttempt``) and the
  events a claim commits before any provider I/O;
- ``loop``: ``Dispatcher``, the claiming round (slots, when a claim is worth it,
  intake's hand-over) that the shared loop (``workers.loop``) runs;
- ``sending``: one claim's provider calls (timeouts, tracing, the message);
- ``settlement``: batched, fenced, durable settlement and the exhausted-claim case;
- ``followers``: what a settled leader does to its dedup followers (satisfy, promote,
  relink, hand off);
- ``references``: the provider references a successful channel attempt records.
"""

from uns_server.workers.dispatch.claims import ChannelAttempt, Claim
from uns_server.workers.dispatch.loop import Dispatcher

__all__ = ["ChannelAttempt", "Claim", "Dispatcher"]
