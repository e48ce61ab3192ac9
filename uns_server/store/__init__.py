"""Storage: SQL only. Tables, the engine, and one function per query.

Everything here runs on both SQLite (aiosqlite) and PostgreSQL (asyncpg); the few
dialect differences (row locking, commit-ordered event sequences, LISTEN/NOTIFY)
are isolated in ``db`` and ``events``.

``port`` states, as Protocols, the outbox operations the workers and services rely
on (claim, fenced settlement, ack guards, retention candidates, the event timeline);
the SQL modules are its implementation, and mypy checks that they conform.
``tests/store/test_conformance.py`` is the one suite that runs each operation
directly on both dialects: claim order and exclusivity under concurrent claimers
(both claim algorithms), lease-expiry recovery, the channel filter, fencing by
token, ack guards, read-after ordering, and retention agreeing with
``domain.retention.holds_work`` (property-tested). A change to a query, or another
implementation of the port, must keep that suite green.
"""
