"""The files in deploy/: Prometheus rules (promtool), the Grafana dashboard's structure,
the systemd unit (systemd-analyze) and the sample channels file (the real loader).
That every dashboard expression names an exported metric is checked against a live
scrape in tests/observability/test_metrics.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.dashboard import (
    CHANNELS_SAMPLE,
    DASHBOARD,
    RULES,
    SYSTEMD_UNIT,
    exprs,
    metric_names,
    panels,
)
from tests.toolchain.tools import find_tool
from uns_server.channels.config import (
    EmailConfig,
    NtfyConfig,
    PagerDutyConfig,
    SlackConfig,
    TeamsConfig,
    TelegramConfig,
    WebhookConfig,
    load_channels_config,
)
from uns_server.channels.twilio_config import TwilioSmsConfig, TwilioVoiceConfig


def test_prometheus_rules_pass_promtool() -> None:
    result = subprocess.run(
        [find_tool("promtool"), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a rule with a bad expression is refused."""
    rules = yaml.safe_load(RULES.read_text())
    rules["groups"][0]["rules"][0]["expr"] = "max(uns_queue_oldest_due_age_seconds"
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [find_tool("promtool"), "check", "rules", str(broken)], capture_output=True, timeout=60
    )
    assert result.returncode != 0


def test_rules_alert_on_what_an_operator_must_act_on() -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    by_metric = {name for r in rules for name in metric_names(r["expr"])}
    assert {
        "uns_queue_oldest_due_age_seconds",
        "uns_notifications_dead_lettered_total",
        "uns_undeliverable_due_notifications",  # stuck channels, by channel
        "uns_ack_timeouts_total",
        "uns_channel_config_info",
        "uns_rpc_server_duration_seconds_count",
    } <= by_metric
    assert any('up{job="uns"}' in r["expr"] for r in rules)  # replica health
    assert all(r["alert"].startswith("Uns") and r["annotations"]["summary"] for r in rules)


def test_dashboard_is_an_importable_grafana_dashboard() -> None:
    data = json.loads(DASHBOARD.read_text())
    assert data["title"] and data["uid"] and isinstance(data["schemaVersion"], int)
    [source] = data["templating"]["list"]
    assert source == {**source, "type": "datasource", "query": "prometheus"}
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids)) and ids
    for panel in panels():
        assert panel["type"] in {"timeseries", "stat", "gauge", "table"}
        assert panel["title"] and panel["targets"]
        assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        for target in panel["targets"]:
            assert target["refId"] and metric_names(target["expr"]), panel["title"]
    assert all(e.count("(") == e.count(")") for e in exprs())


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = find_tool("systemd-analyze")
    # The unit's server path, pointed at this checkout's (verify checks it is executable).
    server = Path(sys.executable).parent / "uns-server"
    unit = tmp_path / SYSTEMD_UNIT.name
    text = SYSTEMD_UNIT.read_text()
    assert "ExecStart=/opt/uns/bin/uns-server\n" in text
    unit.write_text(text.replace("/opt/uns/bin/uns-server", str(server)))
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    # Unknown keys only warn: any message at all fails the test.
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    assert re.search(r"^Restart=on-failure$", text, re.M)


def test_sample_channels_file_loads_with_the_real_loader() -> None:
    data = yaml.safe_load(CHANNELS_SAMPLE.read_text())
    variables = {
        value for options in data.values() for key, value in options.items() if key.endswith("_env")
    }
    # A variable holding a URL (a Teams workflow's) must hold one to load.
    environ = {
        name: ("https://example.com/" if name.endswith("_URL") else "")
        + f"sample-secret-for-{name}"
        for name in sorted(variables)
    }
    # A Twilio account SID has its own shape (AC + 32 hex digits).
    environ.update({name: "AC" + "0" * 32 for name in variables if name.endswith("_ACCOUNT_SID")})
    config = load_channels_config(data, environ)
    kinds = {name: type(c) for name, c in config.channels.items()}
    assert kinds == {
        "ops-webhook": WebhookConfig,
        "alerts-slack": SlackConfig,
        "oncall-mail": EmailConfig,
        "pager": PagerDutyConfig,
        "phone-push": NtfyConfig,
        "ops-teams": TeamsConfig,
        "oncall-telegram": TelegramConfig,
        "sms": TwilioSmsConfig,
        "phone": TwilioVoiceConfig,
        "log": kinds["log"],  # always present
    }
    assert not any(
        "=" in repr(c) and environ[v] in repr(c) for c in config.channels.values() for v in environ
    )
