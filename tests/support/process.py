"""``uns-server`` as a real child process (for acceptance and fault tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.postgres import free_port

SERVING_TIMEOUT_SECONDS = 60.0


class ServerProcess:
    def __init__(
        self,
        cwd: Path,
        *args: str,
        env: dict[str, str] | None = None,
        preamble: str = "",
        program: list[str] | None = None,
        default_channels: str = "log",
    ) -> None:
        """``preamble``: Python statements the child runs before ``main()``; ``program``:
        run that instead (e.g. ``scripts/serve``), with ``--listen`` and ``args``.
        ``default_channels``: where types without a policy go, ``log`` as on
        ``scripts/serve`` (the walkthroughs send ``demo.alert``, which has none); empty:
        they are refused (``NO_POLICY``), as on a bare ``uns-server``."""
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.cwd = cwd
        self.log = cwd / f"uns-server-{self.port}.log"
        command = [
            *(
                program
                or [
                    sys.executable,
                    "-c",
                    f"{preamble}\nfrom uns_server.cli.server import main; main()",
                ]
            ),
            "--listen",
            self.target,
            "--default-channels",
            default_channels,
            *args,
        ]
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    def health(self) -> int | None:
        """The overall health status, or None when the server does not answer."""
        with grpc.insecure_channel(self.target) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=1
                )
            except grpc.RpcError:
                return None
        return int(reply.status)

    def wait_health(self, status: int, timeout: float = SERVING_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"uns-server exited {self.proc.returncode}:\n{self.output()}")
            if self.health() == status:
                return
            time.sleep(0.1)
        raise AssertionError(f"health never became {status}:\n{self.output()}")

    def wait_serving(self) -> None:
        self.wait_health(health_pb2.HealthCheckResponse.SERVING)

    def output(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return self.proc.returncode
