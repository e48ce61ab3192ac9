"""The bare grpc.aio echo server, driven by the same client loop as accept."""

from __future__ import annotations

import asyncio
import sys

import grpc

from bench import client
from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import TYPE_ACCEPT, Harness
from bench.stats import Row
from bench.workloads.common import closed_level, sender
from tests.support.postgres import free_port

READY_TIMEOUT_SECONDS = 30.0


async def run(harness: Harness, profile: Profile, tag: str) -> list[Row]:
    port = free_port()
    proc = harness.spawn(
        [sys.executable, "-m", "bench.baselines.echo_server", str(port)], "echo-server.log"
    )
    meter = CpuMeter(lambda: proc.pid, None)
    target = f"127.0.0.1:{port}"
    rows: list[Row] = []
    try:
        async with client.channel(target) as chan:
            await asyncio.wait_for(chan.channel_ready(), READY_TIMEOUT_SECONDS)
            call = sender(client.stub(chan), TYPE_ACCEPT, f"{tag}-echo")
            for concurrency in profile.concurrency:
                rows.append(
                    await closed_level(
                        call,
                        group="baseline",
                        name="grpc echo",
                        concurrency=concurrency,
                        seconds=profile.seconds,
                        warmup_seconds=profile.warmup_seconds,
                        max_ops=profile.max_ops,
                        meter=meter,
                    )
                )
    except (grpc.RpcError, TimeoutError) as exc:
        raise RuntimeError(f"echo server did not answer: {exc}") from exc
    finally:
        proc.terminate()
        proc.wait(10)
    return rows
