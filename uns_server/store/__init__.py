"""Storage: SQL only. Tables, the engine, and each port's class holding its queries.

Everything here runs on both SQLite (aiosqlite) and PostgreSQL (asyncpg); the few
dialect differences (row locking, commit-ordered event sequences, LISTEN/NOTIFY)
are isolated in ``db`` and ``events``.

``port`` states, as Protocols, what the workers and services call (a ``Store`` of
transactions whose executor has one typed port per concern); ``sql_store.SqlStore``
implements it with one class per port, in the module that holds its statements
(``dispatch.SqlDispatch``, ``jobs.SqlJobs``...; built on ``bound``, each holding the
transaction's connection), and mypy checks that it conforms.
``tests/store/test_conformance.py`` is the one suite that runs each port method
through a ``Store`` on both dialects: claim order and exclusivity under concurrent claimers
(both claim algorithms), lease-expiry recovery, the channel filter, fencing by
token, ack guards, read-after ordering, and retention agreeing with
``domain.retention.holds_work`` (property-tested). A change to a query, or another
implementation of the port, must keep that suite green.
"""
