"""The console in a real browser against `make run`'s stack: every page loads with no console
error, a bulk cancel over a filter of 500 jobs touches exactly those 500 through the typed
confirmation, the calendar shows a planted spike on its hour, the keyboard alone reaches every
link, field and button and carries out an action."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from services.jobs.state import State
from services.local.system import ROOT
from tests.browser.conftest import Console, Watched

PAGES = ("/", "/calendar", "/jobs", "/dead-letters", "/control")
# What the keyboard must reach: every focusable element of the page.
FOCUSABLE = "a[href], button, input:not([type=hidden]), select, textarea"


def test_every_page_loads_without_a_console_error(console: Console, page: Watched) -> None:
    (job_id,) = console.plant("page-tour", 1, timedelta(days=3))
    paths = [
        *PAGES,
        "/calendar?horizon=30d&step=day",
        f"/jobs/{quote(job_id, safe='')}",
        "/bulk?kind=cancel&state=deferred&subject_prefix=page-tour",
    ]
    for path in paths:
        response = page.page.goto(console.url + path)
        assert response is not None and response.status == 200, path
        assert page.page.locator("#stand-in").is_visible(), path  # the stand-in, labelled
        page.shot(path.strip("/").split("?")[0].replace("/", "_") or "overview")
    page.page.goto(console.url + "/")
    overview = page.shot("overview")
    shutil.copy(overview, ROOT / ".local" / "browser-artifacts" / "console-overview.png")


def test_a_bulk_cancel_of_500_touches_exactly_those(console: Console, page: Watched) -> None:
    targets = console.plant("bulk-cat", 500, timedelta(days=2))
    others = console.plant("bulk-dog", 25, timedelta(days=2))
    tab = page.page
    tab.goto(console.url + "/jobs?state=deferred&subject_prefix=bulk-cat")
    tab.get_by_role("link", name="cancel", exact=True).click()
    assert "would touch exactly 500 jobs" in tab.locator("#bulk-count").inner_text()
    tab.get_by_label("Reason").fill("browser test: spam wave")
    tab.locator("#confirm").fill("500")
    page.shot("preview")
    tab.locator("#start-bulk").click()
    tab.locator("#bulk-done").wait_for(timeout=60_000)
    assert tab.locator("#bulk-changed").inner_text() == "500"
    page.shot("done")
    assert {console.store.get(i).state for i in targets} == {State.CANCELLED}  # type: ignore[union-attr]
    assert {console.store.get(i).state for i in others} == {State.DEFERRED}  # type: ignore[union-attr]
    job = console.store.get(targets[0])
    assert job is not None and job.history[-1].by == "operator:console:operator@local.test"


def test_the_calendar_shows_a_planted_spike_on_its_hour(console: Console, page: Watched) -> None:
    hour = (datetime.now(UTC) + timedelta(hours=20)).replace(minute=20, second=0, microsecond=0)
    console.plant("spike", 77, hour - datetime.now(UTC))
    tab = page.page
    tab.goto(console.url + "/calendar?horizon=2d&step=hour")
    row = tab.locator(f"#w-{hour:%Y-%m-%dT%H}")
    assert row.is_visible()
    assert row.locator("td").last.inner_text() == "77"
    assert "Peak: 77 due" in tab.locator("#peak").inner_text()
    page.shot("spike")


def test_the_keyboard_alone_reaches_everything_and_pauses_the_scan(
    console: Console, page: Watched
) -> None:
    tab = page.page
    for path in PAGES:
        tab.goto(console.url + path)
        # Number every focusable element, then Tab until each number has had the focus.
        expected = tab.eval_on_selector_all(
            FOCUSABLE,
            "els => els.filter(e => !e.disabled).map((e, i) => (e.dataset.kb = i, i)).length",
        )
        reached: set[str] = set()
        for _ in range(expected * 2):
            tab.keyboard.press("Tab")
            reached.add(tab.evaluate("() => document.activeElement.dataset.kb || ''"))
        assert reached - {""} == {str(i) for i in range(expected)}, path
    # An action by keyboard only: to Control through the navigation, then pause.
    tab.goto(console.url + "/")
    tab.keyboard.press("Tab")  # the skip link
    _tab_to(tab, 'href="/control"')
    tab.keyboard.press("Enter")
    tab.wait_for_url("**/control")
    _tab_to(tab, 'name="reason"')
    tab.keyboard.type("keyboard drill")
    _tab_to(tab, 'id="toggle-pause"')
    # Wait for the form's own navigation: load state alone is already "loaded" on the page the
    # key was pressed on, and reading it then raced the POST (seen on a fresh clone's CI run).
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
    assert tab.locator("#paused").inner_text() == "yes"
    assert console.store.get_control().paused
    page.shot("paused")
    # Leave the stack as found for the other tests.
    _tab_to(tab, 'name="reason"')
    tab.keyboard.type("drill over")
    _tab_to(tab, 'id="toggle-pause"')
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
    assert tab.locator("#paused").inner_text() == "no"


def _tab_to(tab: object, marker: str, limit: int = 80) -> None:
    for _ in range(limit):
        html = tab.evaluate("() => document.activeElement.outerHTML.slice(0, 300)")  # type: ignore[attr-defined]
        if marker in html:
            return
        tab.keyboard.press("Tab")  # type: ignore[attr-defined]
    raise AssertionError(f"the keyboard never reached {marker}")
