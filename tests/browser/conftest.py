"""The browser tier: the console of `make run`'s stack in headless Chromium (Debian's package,
/usr/bin/chromium) driven by Playwright from PyPI (`executable_path`; `playwright install` is
never run, so nothing is downloaded). One stack for the tier (tests/integration/local/
running_stack.py's driver), jobs planted through the store on its emulators, a page per test
that fails the test on any console error or uncaught exception, screenshots kept under
.local/browser-artifacts (gitignored)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from services.console.settings import CONSOLE_URL
from services.jobs.clock import SystemClock
from services.jobs.model import NewJob
from services.local.system import ROOT
from services.store.job_store import FirestoreJobStore
from tests.integration.local.running_stack import RunningStack, local_stack

CHROMIUM = os.environ.get("JOBS_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / ".local" / "browser-artifacts"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.browser)


@dataclass
class Console:
    """The running stack's console, and a store on the same emulators to plant jobs with."""

    url: str
    store: FirestoreJobStore
    stack: RunningStack

    def plant(
        self, prefix: str, count: int, due_in: timedelta, subject: str | None = None
    ) -> list[str]:
        """`count` media.delete_source jobs `prefix-0000`… due `due_in` from now."""
        due = datetime.now(UTC) + due_in
        jobs = [
            NewJob(
                f"{prefix}-{n:04d}",
                "media.delete_source",
                f"{subject or prefix}-{n:04d}",
                due,
                {"bucket": "media-src", "object": f"{prefix}/{n}.mp4"},
            )
            for n in range(count)
        ]
        for start in range(0, count, 500):
            outcomes = self.store.schedule_many(jobs[start : start + 500], by="browser-test")
            assert all(not isinstance(o, Exception) for o in outcomes), outcomes
        return [j.job_id for j in jobs]


@pytest.fixture(scope="session")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    with local_stack(tmp_path_factory.mktemp("stack")) as stack:
        exports = stack.exports()
        saved = {k: os.environ.get(k) for k in exports}
        os.environ.update(exports)  # the store's client talks to the stack's emulators
        try:
            from google.cloud import firestore

            client = firestore.Client(project=exports["JOBS_PROJECT"])
            store = FirestoreJobStore(client, SystemClock())
            yield Console(exports[CONSOLE_URL], store, stack)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # Root in CI: Chromium's sandbox needs a user namespace root does not get.
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


@dataclass
class Watched:
    page: Page
    errors: list[str] = field(default_factory=list)
    name: str = ""

    def shot(self, label: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.name}-{label}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    watched = Watched(tab, name=request.node.name)

    def on_console(message: Any) -> None:
        if message.type == "error":
            watched.errors.append(f"console: {message.text}")

    tab.on("console", on_console)
    tab.on("pageerror", lambda error: watched.errors.append(f"page: {error}"))
    yield watched
    watched.shot("last")
    context.close()
    assert watched.errors == []
