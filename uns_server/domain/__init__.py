"""Pure domain logic: no asyncio, SQLAlchemy, grpc or httpx imports.

Functions here take values (and ``now`` where time matters) and return values,
so every rule can be tested table-driven without a database or a network.
"""
