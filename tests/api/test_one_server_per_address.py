"""One server per address: a second ``uns-server`` on a taken address exits 2 saying
so, instead of silently sharing the port (gRPC's SO_REUSEPORT default); with
``--reuse-port`` on every process, several share it on purpose."""

from __future__ import annotations

from pathlib import Path

from tests.api.test_lifecycle import SERVING, ServerProcess, base_args
from tests.support.postgres import free_port


def server_on(directory: Path, listen: str, *args: str) -> ServerProcess:
    directory.mkdir()
    server = ServerProcess(directory, *base_args(directory), "--listen", listen, *args)
    server.target = listen
    return server


async def test_a_second_server_on_a_taken_address_exits_2(tmp_path: Path) -> None:
    listen = f"127.0.0.1:{free_port()}"
    first = server_on(tmp_path / "a", listen)
    try:
        await first.wait_health(SERVING)
        second = server_on(tmp_path / "b", listen)
        try:
            assert await second.wait_exit() == 2
            err = second.stderr()
            assert f"cannot listen on {listen}: the address is already in use" in err
            assert "--reuse-port" in err
            assert "--listen (UNS_LISTEN)" in err  # the flag to change
            assert "Traceback" not in err
        finally:
            second.kill()
        # The first one never noticed.
        assert first.proc.poll() is None
        assert await first.health() == SERVING
    finally:
        first.kill()


async def test_servers_share_a_port_only_when_every_one_asks(tmp_path: Path) -> None:
    listen = f"127.0.0.1:{free_port()}"
    servers: list[ServerProcess] = []
    try:
        for name in ("a", "b"):
            server = server_on(tmp_path / name, listen, "--reuse-port")
            servers.append(server)
            await server.wait_log(lambda e: e.get("message") == "listening")
        await servers[0].wait_health(SERVING)
        assert all(s.proc.poll() is None for s in servers)

        # A server that does not ask cannot join them.
        odd = server_on(tmp_path / "c", listen)
        try:
            assert await odd.wait_exit() == 2
            assert "already in use" in odd.stderr()
        finally:
            odd.kill()
    finally:
        for server in servers:
            server.kill()


async def test_a_taken_http_address_names_the_http_flag(tmp_path: Path) -> None:
    http = f"127.0.0.1:{free_port()}"
    first = server_on(tmp_path / "a", f"127.0.0.1:{free_port()}", "--http-listen", http)
    try:
        await first.wait_health(SERVING)
        second = server_on(tmp_path / "b", f"127.0.0.1:{free_port()}", "--http-listen", http)
        try:
            assert await second.wait_exit() == 2
            err = second.stderr()
            assert f"cannot listen on {http} for HTTP" in err
            assert "--http-listen" in err
            assert "--reuse-port" not in err
            assert "Traceback" not in err
        finally:
            second.kill()
    finally:
        first.kill()
