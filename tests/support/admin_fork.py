"""A warm ``uns-admin``: one interpreter per test process that has imported
``uns_server.cli.admin`` once and forks a child per command.

Starting ``python -m uns_server.cli.admin`` cost ~2.5 s of CPU before the command ran
(importing gRPC, SQLAlchemy, aiohttp...), and the CLI suites run a few hundred commands.
A forked child is still a process of its own: its own argv, environment, working
directory, stdin (/dev/null), stdout, stderr and exit status, and it runs the module as
``__main__`` the way ``python -m`` does; only the imports are shared. Coverage follows
the fork (``patch = ["fork"]`` in pyproject.toml).

Run as a script (``python admin_fork.py``) it is the server: one JSON request a line on
stdin, one JSON answer a line on stdout when that command's child has exited, so
commands may overlap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m uns_server.cli.admin *args``; never returns."""
    import runpy
    import traceback

    code: object = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        # Fresh stream objects: the parent's may hold a lock another thread had at fork.
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        sys.argv = [request["module_file"], *request["args"]]
        runpy.run_module("uns_server.cli.admin", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)  # atexit handlers run: coverage saves this child's data


def _serve() -> None:
    import uns_server.cli.admin as admin  # the cost every command shares

    # Each child runs it afresh as __main__, as ``python -m`` does (runpy warns about a
    # module it would run that is already imported).
    del sys.modules["uns_server.cli.admin"]

    lock = threading.Lock()

    def answer(request_id: int, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        line = json.dumps({"id": request_id, "code": os.waitstatus_to_exitcode(status)})
        with lock:
            os.write(1, (line + "\n").encode())

    for line in sys.stdin:
        request = json.loads(line)
        request["module_file"] = admin.__file__
        pid = os.fork()
        if pid == 0:
            _child(request)
        threading.Thread(target=answer, args=(request["id"], pid), daemon=True).start()


class AdminForker:
    """The test process's side: starts the server on first use, sends it commands."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._pending: dict[int, Future[int]] = {}
        self._next = 0
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
        proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        return proc

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            reply = json.loads(line)
            with self._lock:
                future = self._pending.pop(reply["id"])
            future.set_result(int(reply["code"]))
        with self._lock:  # the server died: nobody waits forever
            for future in self._pending.values():
                future.set_exception(RuntimeError("the uns-admin fork server exited"))
            self._pending.clear()
            self._proc = None

    def close(self) -> None:
        """Stop the server (its coverage data is written before pytest combines it)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            proc.wait(timeout=60)

    def submit(
        self, args: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path
    ) -> Future[int]:
        """Run one command; the future is its exit status."""
        future: Future[int] = Future()
        with self._lock:
            if self._proc is None:
                self._proc = self._start()
            self._next += 1
            self._pending[self._next] = future
            request = {
                "id": self._next,
                "args": args,
                "env": env,
                "cwd": str(cwd),
                "stdout": str(stdout),
                "stderr": str(stderr),
            }
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        return future


if __name__ == "__main__":
    _serve()
