"""Per-phase CPU accounting (UNS_PHASE_CPU=1): where a server's CPU goes, by phase.

The live test runs a real uns-server child with the variable set and reads the phases
from its Prometheus endpoint; the others drive the accounting itself on a private
event loop, with busy loops whose own CPU time is known.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.postgres import free_port
from tests.support.process import ServerProcess
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.observability import phases

SENDS = 5


def _busy(seconds: float) -> float:
    """Spin for ``seconds`` of this thread's CPU; returns the CPU it took."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass
    return time.thread_time() - start


def test_each_step_is_charged_to_the_phase_its_task_is_in() -> None:
    spent: dict[str, float] = {"a": 0.0, "b": 0.0}

    async def worker(name: str, seconds: float) -> None:
        with phases.phase(name):
            for _ in range(3):
                spent[name] += _busy(seconds)
                await asyncio.sleep(0)  # the other task runs between our steps

    async def child_inherits() -> None:
        spent["a"] += _busy(0.005)  # no phase of its own: its creator's

    async def scenario() -> dict[str, float]:
        phases.enable()
        try:
            with phases.phase("a"):
                inherited = asyncio.create_task(child_inherits())
            await asyncio.gather(worker("a", 0.01), worker("b", 0.03), inherited)
            return phases.snapshot()
        finally:
            phases.disable()

    totals = asyncio.run(scenario())
    assert totals["a"] >= spent["a"] and totals["b"] >= spent["b"]
    # Neither phase got the other's busy time (overhead is far below 30 ms).
    assert totals["a"] < spent["a"] + spent["b"]
    assert totals["b"] < spent["b"] + spent["a"]
    assert set(phases.PHASES) <= set(totals)
    assert not phases.enabled() and phases.snapshot() == {}


def test_a_switch_inside_a_step_splits_it() -> None:
    async def scenario() -> tuple[dict[str, float], float, float]:
        phases.enable()
        try:

            async def step() -> tuple[float, float]:
                with phases.phase("outer"):
                    outer = _busy(0.02)
                    with phases.phase("inner"):
                        inner = _busy(0.02)
                return outer, inner

            outer, inner = await asyncio.create_task(step())
            return phases.snapshot(), outer, inner
        finally:
            phases.disable()

    totals, outer, inner = asyncio.run(scenario())
    assert outer <= totals["outer"] < outer + inner
    assert inner <= totals["inner"] < inner + outer


def test_phased_is_the_function_itself_when_off() -> None:
    async def fn() -> None:
        return None

    assert not phases.REQUESTED  # the test process does not set UNS_PHASE_CPU
    assert phases.phased(phases.SETTLE)(fn) is fn


def test_live_server_exports_cpu_by_phase(tmp_path: Path) -> None:
    metrics_port = free_port()
    server = ServerProcess(
        tmp_path,
        env={"UNS_PHASE_CPU": "1", "UNS_METRICS_LISTEN": f"127.0.0.1:{metrics_port}"},
    )
    try:
        server.wait_serving()
        key = (tmp_path / "uns-dev-key.txt").read_text().strip()
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.NotificationServiceStub(channel)
            for n in range(SENDS):
                sent = stub.SendNotification(
                    pb.SendNotificationRequest(
                        notification_type="demo.alert",
                        intent=t.NOTIFICATION_INTENT_WARNING,
                        title="Disk almost full",
                        message="92% used",
                        source="phases",
                        idempotency_key=f"phase-{n}",
                        wait_for_first_attempt=True,
                    ),
                    metadata=(("authorization", f"Bearer {key}"),),
                    timeout=30,
                )
                assert sent.state == t.NOTIFICATION_STATE_DELIVERED
        reply = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
    finally:
        server.stop()
    cpu = {
        s.labels["phase"]: s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
        if s.name == "uns_phase_cpu_seconds_total"
    }
    assert set(cpu) == set(phases.PHASES)
    for phase in (phases.ACCEPT, phases.ACCEPT_COMMIT, phases.PROVIDER, phases.SETTLE):
        assert cpu[phase] > 0, (phase, cpu)
