"""Would a PostgreSQL failover lose commits UNS already answered OK for?

Checked once at start when the URL lists several hosts (a primary and its standbys,
docs/deployment.md "High availability"): only synchronous replication keeps an
acknowledged commit through a failover. One endpoint may hide replication that
PostgreSQL's settings do not show (managed storage), so it is not judged.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import make_url

from uns_server.store.db import Database


def lists_several_hosts(db: Database) -> bool:
    hosts = make_url(db.url).query.get("host")
    return isinstance(hosts, tuple) and len(hosts) > 1


async def failover_risk(db: Database) -> str | None:
    """Why acknowledged commits could be lost in a failover, or None."""
    if not db.is_postgres or not lists_several_hosts(db):
        return None
    async with db.read() as conn:
        commit = (await conn.execute(text("SHOW synchronous_commit"))).scalar_one()
        standbys = (await conn.execute(text("SHOW synchronous_standby_names"))).scalar_one()
    if not str(standbys).strip():
        return (
            "synchronous_standby_names is empty on the primary: commits are replicated "
            "asynchronously, so a failover may lose sends already answered OK"
        )
    if commit in ("off", "local"):
        return (
            f"synchronous_commit is {commit}: commits do not wait for the standby, so a "
            "failover may lose sends already answered OK"
        )
    return None
