"""Storage: SQL only. Tables, the engine, and one function per query.

Everything here runs on both SQLite (aiosqlite) and PostgreSQL (asyncpg); the few
dialect differences (row locking, commit-ordered event sequences, LISTEN/NOTIFY)
are isolated in ``db`` and ``events``.
"""
