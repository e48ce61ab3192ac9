"""The services behind the operator's surfaces (the gRPC API and the console), built
once per server so both answer with the same configuration: the same channel names for
policies, the same contact kinds for people, the same windows in memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from uns_server.channels.kinds import person_kinds
from uns_server.services.audit import AuditTrail
from uns_server.services.keys import KeyService
from uns_server.services.maintenance import MaintenanceService
from uns_server.services.operations import Operations
from uns_server.services.people import PeopleService
from uns_server.services.policies import PolicyService
from uns_server.services.queries import Queries

if TYPE_CHECKING:
    from uns_server.app.root import App


@dataclass(frozen=True, slots=True)
class OperatorServices:
    queries: Queries
    operations: Operations
    policies: PolicyService
    people: PeopleService
    keys: KeyService
    maintenance: MaintenanceService
    audit: AuditTrail

    @classmethod
    def build(cls, app: App) -> OperatorServices:
        return cls(
            queries=Queries(app.store),
            operations=Operations(app.store, app.clock),
            policies=PolicyService(app.store, app.clock, app.channels.names()),
            people=PeopleService(app.store, app.clock, person_kinds(app.channels_config)),
            keys=KeyService(app.store, app.clock),
            maintenance=MaintenanceService(app.store, app.clock, app.windows),
            audit=AuditTrail(app.store),
        )
