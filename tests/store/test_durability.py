"""A multi-host URL whose primary replicates asynchronously is reported at start: a
failover there may lose sends already answered OK."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from tests.conftest import PostgresDatabases
from uns_server.store.db import Database
from uns_server.store.durability import failover_risk


async def test_asynchronous_replication_behind_several_hosts_is_a_risk(
    postgres: PostgresDatabases,
) -> None:
    url = make_url(await postgres.new())
    single = url.render_as_string(hide_password=False)
    # The same server listed twice stands in for a primary and a standby.
    several = (
        f"postgresql://{url.username}@{url.host}:{url.port},{url.host}:{url.port}/{url.database}"
    )
    for candidate, expected in ((single, False), (several, True)):
        db = Database(candidate)
        try:
            risk = await failover_risk(db)
        finally:
            await db.dispose()
        assert (risk is not None) == expected, (candidate, risk)
        if expected:
            assert risk and "synchronous_standby_names" in risk
