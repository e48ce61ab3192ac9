"""The server process, composed: ``root.App`` builds and runs everything.

- ``root``: the composition root (settings -> database -> services -> workers ->
  servers), start and graceful stop;
- ``readiness``: connect, migrate and check the key setup, retrying until ready;
- ``health``: gRPC health, following the database and the workers;
- ``grpc_surface``, ``http_surface``: how each server is wired to the services.
"""

from uns_server.app.root import App

__all__ = ["App"]
