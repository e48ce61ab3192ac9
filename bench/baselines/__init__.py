"""Baselines measured in the same run: pgbench, a bare grpc.aio echo, a peer queue."""
