"""What every console handler uses: the same services the gRPC API calls."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from uns_server.http.console.sessions import Session, Sessions
from uns_server.services.acks import AckService
from uns_server.services.heartbeats import HeartbeatService
from uns_server.services.maintenance import MaintenanceService
from uns_server.services.operations import Operations
from uns_server.services.people import PeopleService
from uns_server.services.policies import PolicyService
from uns_server.services.queries import Queries
from uns_server.services.watch import Watch
from uns_server.services.withdrawal import Withdrawals
from uns_server.store.port import Store

VIA = "console"
audit_log = logging.getLogger("uns.console.audit")


@dataclass(frozen=True)
class Console:
    store: Store
    sessions: Sessions
    queries: Queries
    operations: Operations
    acks: AckService
    policies: PolicyService
    watch: Watch
    clock: Callable[[], datetime]
    public_url: Callable[[], str]
    withdrawals: Withdrawals
    # The channels this server is configured with (a notification naming another waits).
    channels: tuple[str, ...] = ()
    # People and rotations (the people page); None: the page is not served.
    people: PeopleService | None = None
    # Where each channel's provider is, ``host:port`` (``channels.config.channel_endpoint``:
    # no path, query, user or secret); the ``log`` channel has none.
    endpoints: Mapping[str, str] = field(default_factory=dict)
    # Maintenance windows (the windows page); None: the page is not served.
    maintenance: MaintenanceService | None = None
    # Heartbeats (the heartbeats page); None: the page is not served.
    heartbeats: HeartbeatService | None = None

    @property
    def secure(self) -> bool:
        return self.public_url().startswith("https://")

    def audit(self, session: Session, action: str, **fields: object) -> None:
        """Every state change made from the console, with its operator and ``via``."""
        audit_log.info(
            "console action",
            extra={"operator": session.principal.name, "via": VIA, "action": action, **fields},
        )
