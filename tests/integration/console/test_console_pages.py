"""The console's pages on the emulator: what each shows, the calendar's planted spike on its
hour, a bulk cancel over a filter touching exactly the jobs its preview counted (confirmation,
batches, the operator in each history), a stop midway, replay of failed jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.bulk import DEFAULT_BATCH, DEFAULT_CONFIRM_OVER
from services.jobs.state import State
from tests.integration.console.conftest import OPERATOR, T0, Console
from tests.integration.console.forms import form

Plant = Callable[..., list[str]]


def states(console: Console, ids: list[str]) -> dict[State, int]:
    counts: dict[State, int] = {}
    for job_id in ids:
        job = console.store.get(job_id)
        assert job is not None
        counts[job.state] = counts.get(job.state, 0) + 1
    return counts


def test_the_overview_shows_the_backlog(console: Console, plant: Plant) -> None:
    plant(3, due=timedelta(hours=-2), prefix="late")
    plant(4, due=timedelta(hours=3), prefix="later")
    page = console.get("/")
    assert page.status_code == HTTPStatus.OK
    assert '<b id="due-now">3</b>' in page.text
    assert '<b id="oldest-overdue">2 h 00 m</b>' in page.text
    assert "No scan run recorded yet." in page.text


def test_the_calendar_shows_a_planted_spike_on_its_hour(console: Console, plant: Plant) -> None:
    plant(2, due=timedelta(hours=1), prefix="a")
    plant(40, due=timedelta(hours=30, minutes=10), prefix="spike")
    page = console.get("/calendar?horizon=3d&step=hour")
    assert page.status_code == HTTPStatus.OK
    spike = (T0 + timedelta(hours=30)).strftime("%Y-%m-%dT%H")
    row = page.text.split(f'id="w-{spike}"', 1)[1].split("</tr>", 1)[0]
    assert ">40<" in row.replace(",", "")
    assert 'id="peak">Peak: <b>40</b>' in page.text
    # 72 hour windows + the overdue count, for each of the catalogue's actions.
    assert "billed reads" in page.text
    bad = console.get("/calendar?horizon=90d&step=hour")
    assert bad.status_code == HTTPStatus.BAD_REQUEST and "horizon:" in bad.text


def test_the_jobs_list_filters_in_the_url_and_pages(console: Console, plant: Plant) -> None:
    plant(60, prefix="cat", subject="cat")
    plant(5, prefix="dog", subject="dog")
    first = console.get("/jobs?state=deferred&subject_prefix=cat")
    assert first.status_code == HTTPStatus.OK
    assert first.text.count('<a href="/jobs/cat-') == 50 and "dog-" not in first.text
    assert 'rel="next"' in first.text
    bad = console.get("/jobs?state=sleeping")
    assert bad.status_code == HTTPStatus.BAD_REQUEST and "state: " in bad.text


def test_a_job_page_shows_its_record_and_history(console: Console, plant: Plant) -> None:
    (job_id,) = plant(1, prefix="odd id é")
    page = console.get(f"/jobs/{quote(job_id, safe='')}")
    assert page.status_code == HTTPStatus.OK
    assert "application:test" in page.text and "scheduled" in page.text
    assert console.get("/jobs/nope").status_code == HTTPStatus.NOT_FOUND


def run_bulk(console: Console, query: str, reason: str, confirm: str | None = None) -> list[str]:
    """Preview, confirm, and follow every batch as the page's script does; the pages seen."""
    preview = console.get(f"/bulk?{query}")
    assert preview.status_code == HTTPStatus.OK, preview.text
    fields = form(preview.text, method="post")
    fields["reason"] = reason
    if confirm is not None:
        fields["confirm"] = confirm
    page = console.post("/bulk", fields)
    seen = [page.text]
    while 'id="next-batch"' in page.text:
        page = console.post("/bulk", form(page.text, id="next-batch"))
        seen.append(page.text)
    assert page.status_code == HTTPStatus.OK, page.text
    return seen


def test_a_bulk_cancel_touches_exactly_the_jobs_of_its_filter(
    console: Console, plant: Plant
) -> None:
    cats = plant(450, prefix="cat", subject="cat")
    dogs = plant(30, prefix="dog", subject="dog")
    console.csrf()
    query = "kind=cancel&state=deferred&subject_prefix=cat"
    preview = console.get(f"/bulk?{query}")
    assert "would touch exactly <b>450</b> jobs" in preview.text
    assert 'id="confirm"' in preview.text  # above the threshold: typed confirmation
    refused = console.post(
        "/bulk", {**form(preview.text, method="post"), "reason": "x", "confirm": "45"}
    )
    assert (
        refused.status_code == HTTPStatus.BAD_REQUEST
        and "type the number of jobs (450)" in refused.text
    )
    assert states(console, cats) == {State.DEFERRED: 450}
    pages = run_bulk(console, query, "spam wave", confirm="450")
    assert len(pages) == -(-450 // DEFAULT_BATCH)
    assert '<b id="bulk-changed">450</b>' in pages[-1] and 'id="bulk-done"' in pages[-1]
    assert states(console, cats) == {State.CANCELLED: 450}
    assert states(console, dogs) == {State.DEFERRED: 30}
    job = console.store.get(cats[123])
    assert job is not None and job.history[-1].by == f"operator:console:{OPERATOR}"
    assert job.history[-1].reason.startswith("spam wave (bulk cancel ")


def test_a_small_bulk_needs_no_typed_count(console: Console, plant: Plant) -> None:
    ids = plant(DEFAULT_CONFIRM_OVER, prefix="few")
    console.csrf()
    preview = console.get("/bulk?kind=reschedule&state=deferred")
    no_offset = console.post("/bulk", {**form(preview.text, method="post"), "reason": "later"})
    assert no_offset.status_code == HTTPStatus.BAD_REQUEST and "give exactly one" in no_offset.text
    pages = run_bulk(console, "kind=cancel&state=deferred", "few")
    assert 'id="bulk-done"' in pages[-1]
    assert states(console, ids) == {State.CANCELLED: DEFAULT_CONFIRM_OVER}


def test_stop_after_a_batch_leaves_the_rest_untouched(console: Console, plant: Plant) -> None:
    ids = plant(DEFAULT_BATCH + 50, prefix="s")
    console.csrf()
    preview = console.get("/bulk?kind=cancel&state=deferred")
    fields = {**form(preview.text, method="post"), "reason": "x", "confirm": str(len(ids))}
    first = console.post("/bulk", fields)
    stop = form(first.text, method="post", class_="inline")
    stopped = console.post("/bulk", stop)
    assert 'id="bulk-stopped"' in stopped.text and 'id="next-batch"' not in stopped.text
    assert states(console, ids) == {State.CANCELLED: DEFAULT_BATCH, State.DEFERRED: 50}


def test_reschedule_by_an_offset(console: Console, plant: Plant) -> None:
    ids = plant(3, prefix="r")
    console.csrf()
    preview = console.get("/bulk?kind=reschedule&state=deferred")
    fields = {**form(preview.text, method="post"), "reason": "move", "offset": "+2h"}
    done = console.post("/bulk", fields)
    assert 'id="bulk-done"' in done.text, done.text
    job = console.store.get(ids[0])
    assert job is not None and job.due_at == T0 + timedelta(hours=3)


def test_failed_jobs_are_listed_and_replayed(
    console: Console, plant: Plant, firestore_client: firestore.Client
) -> None:
    for job_id in plant(2, prefix="f"):
        job = console.store.get(job_id)
        assert job is not None
        failed = dataclasses.replace(job, state=State.FAILED)
        firestore_client.collection(schema.JOBS).document(job_id).set(failed.to_document())
    page = console.get("/dead-letters")
    assert "2 jobs failed" in page.text and 'id="replay-failed"' in page.text
    console.csrf()
    pages = run_bulk(console, "kind=replay&state=failed", "storage is back")
    assert 'id="bulk-done"' in pages[-1]
    deferred = console.get("/jobs?state=deferred").text
    assert deferred.count('">f-000.replay-') + deferred.count('">f-001.replay-') == 2


@pytest.mark.builtin_emulator("billing counters")
def test_an_overview_bills_its_counts_the_control_document_and_the_runs(
    console: Console, plant: Plant, firestore_stats: Any
) -> None:
    plant(2500, due=timedelta(hours=5), prefix="many")
    console.get("/")  # the IAP keys and the first view's caches, once
    firestore_stats.reset()
    assert console.get("/").status_code == HTTPStatus.OK
    # 7 state counts (deferred: 2,500 entries, 3 reads), the due probe and 3 counts, the
    # control document, the scan runs query (none recorded: 1).
    assert firestore_stats.get()["document_reads"] == (3 + 6) + 4 + 1 + 1
