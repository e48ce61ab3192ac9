"""The console workload at token size: a real PostgreSQL, the real seed and console
servers, every page asked for through a signed-in session (no timings asserted)."""

from __future__ import annotations

from pathlib import Path

from bench import config, report
from bench.harness import WEBHOOK_SECRET, Harness
from bench.receiver import WebhookReceiver
from bench.workloads import console


def test_the_mix_adds_up_to_the_size_asked_for() -> None:
    for total in (300, 1_000_000):
        rows = console.counts(total)
        assert sum(rows.values()) == total
        assert set(rows) == {k.name for k in console.MIX}
    assert console.server_ms("db;dur=2, app;dur=12.5") == 12.5
    assert console.server_ms(None) is None


async def test_console_pages_render_on_a_filled_database(tmp_path: Path) -> None:
    receiver = WebhookReceiver(WEBHOOK_SECRET)
    await receiver.start()
    harness = Harness(tmp_path)
    try:
        harness.write_channels(receiver.url())
        rows = await console.run(harness, receiver, config.SMOKE, "smoke")
    finally:
        harness.close()
        await receiver.stop()
    pages = [r for r in rows if r.name == "console"]
    assert len(pages) == 17
    for row in pages:  # every page answered 200 with a Server-Timing header each time
        assert row.extra["statuses"] == [200], (row.setting, row.extra)
        assert len(row.latencies_ms) == config.SMOKE.console_requests, row.setting
    seeds = sum(1 for k in console.MIX if k.name in console.WANT)
    assert pages[0].extra["notifications"] == config.SMOKE.console_notifications + seeds
    assert pages[0].extra["events"] > pages[0].extra["notifications"]
    by_page = {r.setting: r for r in pages}
    assert by_page["notifications, page 2"].extra["path"].endswith("page_token=") is False
    idle = [r for r in rows if r.name == "console idle"]
    assert [r.setting for r in idle] == ["idle, no console open", "idle, 1 SSE stream open"]
    assert all(isinstance(r.extra["db_transactions"], int) for r in idle)  # noise at this size
    text = "\n".join(report.console_pages(report.Results(rows)))
    assert "dead letters by error" in text and "target 100 ms" in text
