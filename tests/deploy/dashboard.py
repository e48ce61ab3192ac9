"""The Grafana dashboard and Prometheus rules in deploy/, read for the tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "uns-dashboard.json"
RULES = REPO_ROOT / "deploy" / "prometheus" / "uns-rules.yml"
SYSTEMD_UNIT = REPO_ROOT / "deploy" / "systemd" / "uns-server.service"
CHANNELS_SAMPLE = REPO_ROOT / "deploy" / "uns-channels.yml"

# A metric name in PromQL: our families and the process collector's.
_METRIC = re.compile(r"\b((?:uns|process|python)_[a-z0-9_]+)\b")


def panels() -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return list(data["panels"])


def exprs() -> list[str]:
    return [target["expr"] for panel in panels() for target in panel["targets"]]


def metric_names(expr: str) -> set[str]:
    return set(_METRIC.findall(expr))
