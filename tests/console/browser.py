"""Debian's chromium driven by Playwright through ``executable_path`` (no browser
download), as in tests/http/test_browser.py; ``scripts/install-tools.sh`` installs it.
Missing: the test skips, and fails under ``UNS_REQUIRE_TOOLCHAINS=1`` (CI)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.toolchain.tools import require_module, skip_or_fail


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    skip_or_fail("chromium not found: run scripts/install-tools.sh (apt-get install chromium)")
    raise AssertionError("unreachable")


@asynccontextmanager
async def launched() -> AsyncIterator[Any]:
    """A headless Chromium browser (Playwright's ``Browser``)."""
    executable = chromium()
    require_module("playwright")
    from playwright.async_api import async_playwright

    sandbox = [] if os.getuid() else ["--no-sandbox"]  # Chromium refuses root otherwise
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, args=sandbox)
        try:
            yield browser
        finally:
            await browser.close()
