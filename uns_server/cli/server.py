"""``uns-server``: run the gRPC service until SIGTERM/SIGINT, then drain and stop."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import sys
from dataclasses import MISSING, fields

import yaml

from uns_server import logs
from uns_server.app import App
from uns_server.cli.errors import quiet_when_the_reader_leaves
from uns_server.cli.server_help import GROUPS, HELP
from uns_server.settings import Settings, SettingsError

log = logging.getLogger("uns.server")
# Allocations between young-generation collections (CPython's default is 700).
GC_GEN0_THRESHOLD = 20_000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="uns-server",
        # The settings below, by concern; listing ~60 flags here would hide them.
        usage="%(prog)s [--SETTING VALUE ...]",
        description="UNS gRPC server. Every flag also reads UNS_<NAME> from the environment.",
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for title, (description, names) in GROUPS.items():
        group = parser.add_argument_group(title, description)
        groups.update(dict.fromkeys(names, group))
    other = parser.add_argument_group("other settings")
    for f in fields(Settings):
        group = groups.get(f.name, other)
        flag = "--" + f.name.replace("_", "-")
        default = None if f.default is MISSING else f.default
        shown = "none" if default in (None, "") else default
        # %% : argparse formats help with %-interpolation.
        described = f"{HELP[f.name]}. " if f.name in HELP else ""  # tests require one
        text = f"{described}[UNS_{f.name.upper()}] default: {shown}".replace("%", "%%")
        if str(f.type).startswith("bool"):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
            group.add_argument(flag, type=kind, default=None, help=text)
    return parser


async def serve(settings: Settings, *, parent: int | None = None, instance: str = "") -> int:
    """Run until SIGTERM/SIGINT (exit 0) or until the server cannot ever start (exit 2).
    ``parent``: a pipe from the supervisor whose end (it died) drains like SIGTERM;
    ``instance``: this child's name in telemetry (``service.instance.id``)."""
    try:
        app = App(settings, dict(os.environ), instance=instance)
    except (SettingsError, OSError, ValueError, yaml.YAMLError) as exc:
        # Unreadable or invalid --api-keys-file / --channels-file.
        log.critical("cannot start: %s", " ".join(str(exc).split()))
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if parent is not None:
        _drain_when_closed(loop, parent, stop)
    try:
        await app.start()
    except SettingsError as exc:  # the address is taken, or cannot be bound
        log.critical("cannot start: %s", exc)
        print(f"uns-server: {exc}", file=sys.stderr, flush=True)
        await app.stop(grace=0)
        return 2
    _tune_gc()
    print(
        f"uns-server listening on {settings.listen} (port {app.port})", file=sys.stderr, flush=True
    )
    if app.http is not None:
        print(
            f"uns-server HTTP on {settings.http_listen} (port {app.http_port}), "
            f"links at {app.public_url}",
            file=sys.stderr,
            flush=True,
        )
    failed = asyncio.create_task(app.failure())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if failed.done() and failed.result() is not None:
        log.critical("cannot start: %s", failed.result())
        code = 2
    failed.cancel()
    stopped.cancel()
    await app.stop()
    return code


def _drain_when_closed(loop: asyncio.AbstractEventLoop, fd: int, stop: asyncio.Event) -> None:
    """Stop when the supervisor's end of the pipe closes: a supervisor that was killed
    (SIGKILL, OOM) leaves no child serving on without it."""

    def readable() -> None:
        try:
            more = os.read(fd, 4096)
        except OSError:
            more = b""
        if not more:
            loop.remove_reader(fd)
            if not stop.is_set():
                log.warning("the supervisor is gone: draining")
                stop.set()

    loop.add_reader(fd, readable)


def _tune_gc() -> None:
    """What start-up allocated (modules, protobuf descriptors, compiled SQL) lives as long
    as the process: freeze it out of the collector's scans, and collect the young
    generation less often. Untuned, full collections of that heap paused the event
    loop for 50-170 ms several times a minute under load, which set the p99 of
    WatchEvents at 1,000 streams (docs/PERFORMANCE.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])


def main(argv: list[str] | None = None) -> None:
    quiet_when_the_reader_leaves(lambda: _main(argv))


def _main(argv: list[str] | None) -> None:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env(os.environ, **vars(args))
    except SettingsError as exc:
        print(f"uns-server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    logs.configure(settings.log_level, settings.log_format)
    if settings.processes > 1:
        from uns_server.cli.processes import Supervisor

        raise SystemExit(asyncio.run(Supervisor(settings).run()))
    raise SystemExit(asyncio.run(serve(settings)))


def child_main() -> None:
    """One serving child of ``uns-server --processes N`` (``cli/processes.py``). Its
    settings arrive on stdin as one JSON line (not in argv or the environment: they may
    hold secrets); the pipe then stays open until the supervisor exits."""
    spec = json.loads(sys.stdin.buffer.readline())
    try:
        settings = Settings(**spec["settings"])
        settings.validate()
    except (SettingsError, TypeError) as exc:
        print(f"uns-server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    child = int(spec["child"])
    logs.configure(settings.log_level, settings.log_format, {"child": child})
    instance = f"{spec['host']}:{settings.listen.rpartition(':')[2]}/{child}"
    raise SystemExit(asyncio.run(serve(settings, parent=sys.stdin.fileno(), instance=instance)))


if __name__ == "__main__":
    main()
