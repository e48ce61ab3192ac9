#!/usr/bin/env bash
# Installs the pinned code-generation toolchain for protos/ (see buf.gen.yaml).
#
#   scripts/install-tools.sh [--quiet]          everything below
#   scripts/install-tools.sh grpcurl [TOOL...]  only these (needs go): grpcurl, ghz,
#                                               grpc-health-probe, protoc-gen-go,
#                                               protoc-gen-go-grpc; says where each is
#
# Go and Rust plugins (and grpcurl, ghz, grpc-health-probe) go to ${UNS_TOOLS_DIR:-$HOME/.cache/uns-tools}/bin;
# buf, grpcio-tools and mypy-protobuf are pip packages in the python
# environment of $PYTHON (default: the repo's .venv when it exists, else
# python3); their entry points are linked into the same bin directory so that
# one PATH entry finds every tool.
#
# Idempotent: a tool whose pinned version is already installed is skipped, so a
# second run takes about a second. A missing `go` or `cargo` skips that
# language's tools with a message, unless UNS_REQUIRE_TOOLCHAINS=1. Chromium (for
# the action-link browser test), promtool (Debian's prometheus), systemd-analyze,
# prometheus-alertmanager (the Alertmanager intake test), pgbouncer, patroni and etcd
# (the reliability tests) come from apt-get when they are missing and we may.
set -euo pipefail

# --- pinned versions (bump here; then run scripts/generate.sh and commit) ---
BUF_VERSION=1.75.0                 # pip buf-bin
GRPCIO_TOOLS_VERSION=1.85.1        # pip; bundles protoc + grpc_python plugin
MYPY_PROTOBUF_VERSION=5.1.0        # pip; protoc-gen-mypy, protoc-gen-mypy_grpc
PROTOC_GEN_GO_VERSION=v1.36.12     # google.golang.org/protobuf
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2  # google.golang.org/grpc/cmd/protoc-gen-go-grpc
GRPCURL_VERSION=v1.9.4             # github.com/fullstorydev/grpcurl
GHZ_VERSION=v0.120.0               # github.com/bojand/ghz (load generator: bench, reflection tests)
GRPC_HEALTH_PROBE_VERSION=v0.4.62  # github.com/grpc-ecosystem/grpc-health-probe
PROTOC_GEN_PROST_VERSION=0.5.0     # emits code for prost 0.14
PROTOC_GEN_TONIC_VERSION=0.5.0     # emits code for tonic 0.14 + tonic-prost

# The tools that can be installed alone (go install): name -> package@version.
declare -A GO_TOOLS=(
  [protoc-gen-go]="google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
  [protoc-gen-go-grpc]="google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
  [grpcurl]="github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION"
  [ghz]="github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION"
  [grpc-health-probe]="github.com/grpc-ecosystem/grpc-health-probe@$GRPC_HEALTH_PROBE_VERSION"
)
QUIET=0
ONLY=()
for arg in "$@"; do
  case "$arg" in
    -q | --quiet) QUIET=1 ;;
    -h | --help)
      sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "install-tools: unknown argument: $arg" >&2
      exit 64
      ;;
    *)
      if [[ -z "${GO_TOOLS[$arg]:-}" ]]; then
        echo "install-tools: cannot install $arg alone; one of: ${!GO_TOOLS[*]}" >&2
        exit 64
      fi
      ONLY+=("$arg")
      ;;
  esac
done

TOOLS_DIR="${UNS_TOOLS_DIR:-$HOME/.cache/uns-tools}"
BIN="$TOOLS_DIR/bin"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
REQUIRE="${UNS_REQUIRE_TOOLCHAINS:-0}"
mkdir -p "$BIN"

say() { [[ "$QUIET" == 1 ]] || echo "install-tools: $*"; }
# Actions (installs) are always printed, even with --quiet.
act() { echo "install-tools: $*"; }
go_install_one() { # binary, package, version
  local bin="$1" pkg="$2" version="$3" have=""
  if [[ -x "$BIN/$bin" ]]; then
    # `go version -m` reads the module version embedded in the binary.
    have="$(go version -m "$BIN/$bin" 2>/dev/null | awk '$1 == "mod" { print $3; exit }')"
  fi
  if [[ "$have" == "$version" ]]; then
    say "ok   $bin $version (already installed)"
    return
  fi
  act "go install $pkg@$version"
  GOBIN="$BIN" go install "$pkg@$version"
}
missing_toolchain() { # name, what-is-skipped
  if [[ "$REQUIRE" == 1 ]]; then
    echo "install-tools: ERROR: '$1' not found on PATH (UNS_REQUIRE_TOOLCHAINS=1); cannot install $2" >&2
    exit 1
  fi
  echo "install-tools: WARNING: '$1' not found on PATH; skipping $2 (install $1 and re-run)" >&2
}

# --- Only the named tools: go install each, then say where it is -------------
if ((${#ONLY[@]})); then
  if ! command -v go >/dev/null 2>&1; then
    echo "install-tools: ERROR: ${ONLY[*]} are built with go, which is not on PATH:" \
      "install Go (https://go.dev/dl/) and re-run" >&2
    exit 1
  fi
  for tool in "${ONLY[@]}"; do
    spec="${GO_TOOLS[$tool]}"
    go_install_one "$tool" "${spec%@*}" "${spec##*@}"
    echo "install-tools: $tool is $BIN/$tool (add $BIN to PATH, or run it by that path)"
  done
  exit 0
fi

# --- Python: buf, grpcio-tools, mypy-protobuf --------------------------------
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "install-tools: ERROR: $PYTHON not found; buf and the Python generators need it" >&2
  exit 1
fi

pip_installed_version() { # distribution name -> version or empty
  "$PYTHON" - "$1" <<'EOF'
import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    print("")
EOF
}

pip_wanted=()
for spec in "buf-bin==$BUF_VERSION" "grpcio-tools==$GRPCIO_TOOLS_VERSION" "mypy-protobuf==$MYPY_PROTOBUF_VERSION"; do
  name="${spec%%==*}" version="${spec##*==}"
  have="$(pip_installed_version "$name")"
  if [[ "$have" == "$version" ]]; then
    say "ok   $name $version (pip, already installed)"
  else
    pip_wanted+=("$spec")
  fi
done
if ((${#pip_wanted[@]})); then
  act "pip install ${pip_wanted[*]}"
  "$PYTHON" -m pip install --disable-pip-version-check --root-user-action=ignore --quiet "${pip_wanted[@]}"
fi

# Link the pip entry points into $BIN so one PATH entry finds every tool.
PY_SCRIPTS="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
for exe in buf protoc-gen-mypy protoc-gen-mypy_grpc; do
  src="$PY_SCRIPTS/$exe"
  if [[ ! -x "$src" ]]; then
    echo "install-tools: ERROR: $src missing after pip install" >&2
    exit 1
  fi
  if [[ "$(readlink "$BIN/$exe" 2>/dev/null || true)" != "$src" ]]; then
    ln -sfn "$src" "$BIN/$exe"
    say "link $BIN/$exe -> $src"
  fi
done

# --- Go: protoc-gen-go, protoc-gen-go-grpc, grpcurl --------------------------
if command -v go >/dev/null 2>&1; then
  for tool in protoc-gen-go protoc-gen-go-grpc grpcurl ghz grpc-health-probe; do
    spec="${GO_TOOLS[$tool]}"
    go_install_one "$tool" "${spec%@*}" "${spec##*@}"
  done
else
  missing_toolchain go "protoc-gen-go, protoc-gen-go-grpc, grpcurl, ghz and grpc-health-probe"
fi

# --- Rust: protoc-gen-prost, protoc-gen-tonic --------------------------------
cargo_wanted=()
for spec in "protoc-gen-prost@$PROTOC_GEN_PROST_VERSION" "protoc-gen-tonic@$PROTOC_GEN_TONIC_VERSION"; do
  name="${spec%@*}" version="${spec#*@}"
  # cargo records what it installed under --root in .crates.toml.
  if [[ -x "$BIN/$name" ]] && grep -qF "\"$name $version (" "$TOOLS_DIR/.crates.toml" 2>/dev/null; then
    say "ok   $name $version (already installed)"
  else
    cargo_wanted+=("$spec")
  fi
done
if ((${#cargo_wanted[@]})); then
  if command -v cargo >/dev/null 2>&1; then
    act "cargo install --locked ${cargo_wanted[*]} (a few minutes when cold)"
    # One shared target dir lets the second crate reuse the first one's deps.
    target="$(mktemp -d "${TMPDIR:-/tmp}/uns-tools-cargo.XXXXXX")"
    trap 'rm -rf "$target"' EXIT
    CARGO_TARGET_DIR="$target" cargo install --quiet --locked --force --root "$TOOLS_DIR" "${cargo_wanted[@]}"
  else
    missing_toolchain cargo "protoc-gen-prost and protoc-gen-tonic"
  fi
fi

# --- Chromium for the browser test of action links (tests/http/test_browser.py) ---
# Debian's package, driven by Playwright (pip, dev extra) through executable_path:
# no browser download. Installed with apt-get when we may (root or passwordless sudo).
# Another apt-get (an unattended upgrade, a neighbouring install) may hold dpkg's lock:
# wait for it rather than fail the install.
APT_WAIT="-o DPkg::Lock::Timeout=600"
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  say "ok   chromium (found on PATH)"
elif command -v apt-get >/dev/null 2>&1 && { [[ $(id -u) == 0 ]] || sudo -n true 2>/dev/null; }; then
  act "apt-get install chromium (the browser test of action links)"
  sudo_=""; [[ $(id -u) == 0 ]] || sudo_="sudo -n"
  $sudo_ apt-get $APT_WAIT install -y -qq chromium >/dev/null || {
    $sudo_ apt-get $APT_WAIT update -qq >/dev/null && $sudo_ apt-get $APT_WAIT install -y -qq chromium >/dev/null
  } || missing_toolchain chromium "the browser test (apt-get install chromium failed)"
else
  missing_toolchain chromium "the browser test (install Debian's chromium package)"
fi

# --- promtool and systemd-analyze for the deployment files (tests/deploy/) ---
# Debian's prometheus package brings promtool (checks deploy/prometheus/uns-rules.yml);
# systemd brings systemd-analyze (verifies deploy/systemd/uns-server.service).
apt_tool() { # command, package, what-needs-it
  if command -v "$1" >/dev/null 2>&1; then
    say "ok   $1 (found on PATH)"
  elif command -v apt-get >/dev/null 2>&1 && { [[ $(id -u) == 0 ]] || sudo -n true 2>/dev/null; }; then
    act "apt-get install $2 ($3)"
    local sudo_=""; [[ $(id -u) == 0 ]] || sudo_="sudo -n"
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get $APT_WAIT install -y -qq --no-install-recommends "$2" >/dev/null || {
      $sudo_ apt-get $APT_WAIT update -qq >/dev/null &&
        $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get $APT_WAIT install -y -qq --no-install-recommends "$2" >/dev/null
    } || missing_toolchain "$1" "$3 (apt-get install $2 failed)"
  else
    missing_toolchain "$1" "$3 (install Debian's $2 package)"
  fi
}
apt_tool promtool prometheus "the Prometheus rules check"
apt_tool systemd-analyze systemd "the systemd unit check"
# Debian's prometheus-alertmanager (0.25) for tests/http/test_alertmanager_config.py, which
# runs its own on a free loopback port without clustering: the system service the package
# enables (ports 9093 and 9094) is left alone, nothing here uses it.
apt_tool prometheus-alertmanager prometheus-alertmanager "the Alertmanager intake test"
# Debian's pgbouncer (1.18) for tests/reliability/test_pgbouncer.py; in /usr/sbin.
PATH="$PATH:/usr/sbin" apt_tool pgbouncer pgbouncer "the pgbouncer reliability test"

# Debian's patroni (3.0) and etcd-server (3.4) for tests/reliability/test_patroni.py. The
# test runs etcd and Patroni as its own processes on free loopback ports; the system
# services these packages enable are stopped and disabled right after we install them
# (only then: one that was there before may be someone's).
quiet_service() { # service
  local sudo_=""; [[ $(id -u) == 0 ]] || sudo_="sudo -n"
  if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled --quiet "$1" 2>/dev/null; then
    act "systemctl disable --now $1 (the Patroni test runs its own)"
    $sudo_ systemctl disable --now "$1" >/dev/null 2>&1 || true
  fi
  if [[ -x "/etc/init.d/$1" ]] && "/etc/init.d/$1" status >/dev/null 2>&1; then
    act "/etc/init.d/$1 stop (the Patroni test runs its own)"
    $sudo_ "/etc/init.d/$1" stop >/dev/null 2>&1 || true
  fi
}
for tool in patroni:patroni etcd:etcd-server; do
  cmd="${tool%%:*}" package="${tool#*:}"
  if command -v "$cmd" >/dev/null 2>&1; then
    say "ok   $cmd (found on PATH)"
    continue
  fi
  apt_tool "$cmd" "$package" "the Patroni reliability test"
  if command -v "$cmd" >/dev/null 2>&1; then quiet_service "$cmd"; fi
done

say "done; tools are in $BIN"
