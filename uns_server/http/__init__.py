"""The HTTP surface (SPEC §5): action-link pages and provider callbacks, transport only.

Handlers parse and verify requests, call the same services the gRPC API calls, and
render answers; no decision is made here.
"""
