"""The generated clients are current, lint-clean and build in every language.

Needs the toolchain from scripts/install-tools.sh; see tools.py for how a
missing tool skips (or, with UNS_REQUIRE_TOOLCHAINS=1, fails) a test.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.toolchain.tools import (
    GO_CLIENT_DIR,
    PYTHON_CLIENT_DIR,
    REPO_ROOT,
    RUST_CLIENT_DIR,
    find_tool,
    find_tools,
    require_module,
    run,
    tool_env,
)

# Every plugin in buf.gen.yaml, plus the toolchains install-tools.sh needs.
CODEGEN_TOOLS = (
    "buf",
    "go",
    "cargo",
    "protoc-gen-go",
    "protoc-gen-go-grpc",
    "protoc-gen-prost",
    "protoc-gen-tonic",
    "protoc-gen-mypy",
    "protoc-gen-mypy_grpc",
)

# Outside the repo, so building leaves the work tree clean and is reused.
CARGO_TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or str(
    Path.home() / ".cache" / "uns-cargo-target"
)


def test_buf_lint_is_clean() -> None:
    buf = find_tool("buf")
    run([buf, "lint"])


def test_buf_format_has_no_diff() -> None:
    buf = find_tool("buf")
    proc = run([buf, "format", "--diff", "--exit-code"])
    assert proc.stdout == ""


def copy_of_work_tree(dest: Path) -> Path:
    """The work tree's files (tracked and untracked, not ignored, as they are on disk)
    in a fresh repository at ``dest`` with one commit."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the work tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "work tree"]):
        subprocess.run([*git, *args], cwd=dest, capture_output=True, check=True)
    return dest


def test_generated_code_is_current(tmp_path: Path) -> None:
    # In a copy: generate.sh deletes and rewrites the stubs, the descriptor set and
    # openapi.json, which tests running beside this one (pytest -n) import and serve.
    find_tools(*CODEGEN_TOOLS)
    require_module("grpc_tools")
    require_module("mypy_protobuf")
    copy = copy_of_work_tree(tmp_path / "repo")
    run(["bash", str(copy / "scripts" / "check-generated.sh")], cwd=copy, timeout=900)


def test_go_client_builds_and_vets() -> None:
    go = find_tool("go")
    run([go, "build", "./..."], cwd=GO_CLIENT_DIR)
    run([go, "vet", "./..."], cwd=GO_CLIENT_DIR)


@pytest.mark.timeout(1800)  # from cold: minutes on two busy cores
def test_rust_client_builds_locked() -> None:
    cargo = find_tool("cargo")
    env = tool_env({"CARGO_TARGET_DIR": CARGO_TARGET_DIR})
    # --locked: Cargo.lock is committed and must not need changes.
    run([cargo, "build", "--locked", "--lib", "--bins"], cwd=RUST_CLIENT_DIR, env=env, timeout=1800)


def test_python_stubs_import_and_round_trip() -> None:
    require_module("google.protobuf")
    grpc = require_module("grpc")
    if str(PYTHON_CLIENT_DIR) not in sys.path:
        sys.path.insert(0, str(PYTHON_CLIENT_DIR))
    types = importlib.import_module("uns.v1.types_pb2")
    ns = importlib.import_module("uns.v1.notification_service_pb2")
    ps = importlib.import_module("uns.v1.policy_service_pb2")
    ns_grpc = importlib.import_module("uns.v1.notification_service_pb2_grpc")
    ps_grpc = importlib.import_module("uns.v1.policy_service_pb2_grpc")
    # Through the root link ``uns -> clients/python/uns`` when imported from the root.
    stubs = (PYTHON_CLIENT_DIR / "uns" / "v1").resolve()
    assert Path(ns.__file__ or "").resolve().is_relative_to(stubs)

    request = ns.SendNotificationRequest(
        notification_type="demo.alert",
        intent=types.NOTIFICATION_INTENT_INFORMATIONAL,
        title="Disk almost full",
        message="/var is at 97%",
        source="toolchain-test",
        idempotency_key="k-1",
        autonomy_context=types.AutonomyContext(
            autonomy_mode=types.AUTONOMY_MODE_SUPERVISED, agent_id="agent-1"
        ),
        require_ack=False,
    )
    request.metadata.update({"lang": "python", "nested": {"depth": 2, "tags": ["a", "b"]}})
    decoded = ns.SendNotificationRequest.FromString(request.SerializeToString())
    assert decoded == request
    # proto3 `optional` keeps presence, even for the default value.
    assert decoded.HasField("require_ack") and decoded.require_ack is False
    assert decoded.metadata["nested"]["tags"][1] == "b"
    assert decoded.autonomy_context.agent_id == "agent-1"

    response = ns.GetNotificationResponse(
        notification=types.Notification(id="n-1", state=types.NOTIFICATION_STATE_PENDING)
    )
    again = ns.GetNotificationResponse.FromString(response.SerializeToString())
    assert types.NotificationState.Name(again.notification.state) == "NOTIFICATION_STATE_PENDING"

    # Stubs and servicers cover every RPC of both services. Creating a channel
    # does not connect.
    channel = grpc.insecure_channel("127.0.0.1:9")
    try:
        for pb2, stubs, service in (
            (ns, ns_grpc, "NotificationService"),
            (ps, ps_grpc, "PolicyService"),
        ):
            stub = getattr(stubs, f"{service}Stub")(channel)
            servicer = getattr(stubs, f"{service}Servicer")
            for method in pb2.DESCRIPTOR.services_by_name[service].methods:
                assert callable(getattr(stub, method.name)), (service, method.name)
                assert callable(getattr(servicer, method.name)), (service, method.name)
    finally:
        channel.close()

    # A typed package: py.typed and a .pyi beside every generated module.
    package = PYTHON_CLIENT_DIR / "uns"
    assert (package / "py.typed").is_file()
    for module_file in (package / "v1").glob("*_pb2*.py"):
        assert module_file.with_suffix(".pyi").is_file(), module_file
