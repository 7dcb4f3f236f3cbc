"""Benchmark of the built-in Firestore emulator with the real client.

Run: ``.venv/bin/python -m tests.benchmarks firestore``. The emulator runs as its own process
(``python -m emulators.firestore``), as it does for ``make run``; the client drives it over gRPC.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

TOTAL_DOCS = 200_000
MATCHING = 100
UTC = dt.UTC


@contextmanager
def emulator_process() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "emulators.firestore", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        match = re.search(r"listening on (\S+);", process.stdout.readline())
        assert match, "emulator did not start"
        yield match.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)


def rate(count: int, fn: Callable[[int], Any]) -> float:
    start = time.perf_counter()
    for i in range(count):
        fn(i)
    return count / (time.perf_counter() - start)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def load(client: Any, collection: str, docs: Callable[[int], dict[str, Any]]) -> float:
    col = client.collection(collection)

    def commit_chunk(first: int) -> None:
        batch = client.batch()
        for i in range(first, min(first + 500, TOTAL_DOCS)):
            batch.set(col.document(f"job-{i:06d}"), docs(i))
        batch.commit()

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(commit_chunk, range(0, TOTAL_DOCS, 500)))
    return time.perf_counter() - start


def due_query(client: Any, collection: str, now: dt.datetime) -> Any:
    return (
        client.collection(collection)
        .where(filter=FieldFilter("state", "==", "deferred"))
        .where(filter=FieldFilter("due_at", "<=", now))
        .order_by("due_at")
        .limit(500)
    )


def query_latency(client: Any, collection: str, now: dt.datetime) -> tuple[float, float, int]:
    """(first run incl. any index build, median of 10 later runs, documents returned)."""
    query = due_query(client, collection, now)
    found: list[Any] = []
    first = timed(lambda: found.extend(query.stream()))
    runs = [timed(lambda: list(query.stream())) for _ in range(10)]
    return first, statistics.median(runs), len(found)


def count_latency(client: Any, collection: str) -> tuple[int, float]:
    query = client.collection(collection).where(filter=FieldFilter("state", "==", "deferred"))
    start = time.perf_counter()
    value = int(query.count().get()[0][0].value)
    return value, time.perf_counter() - start


def main() -> None:
    with emulator_process() as address:
        os.environ["FIRESTORE_EMULATOR_HOST"] = address
        client = firestore.Client(project="bench")
        col = client.collection("single")
        writes = rate(1000, lambda i: col.document(f"d{i % 100}").set({"i": i, "s": "x" * 100}))
        print(f"single-write commits/s (1,000 sequential Commit calls): {writes:,.0f}")

        def commit_500(round_: int) -> None:
            batch = client.batch()
            for i in range(500):
                batch.set(
                    client.collection("big").document(f"r{round_}-{i}"), {"i": i, "p": "y" * 200}
                )
            batch.commit()

        latencies = [timed(functools.partial(commit_500, r)) for r in range(7)]
        print(
            f"500-write commit latency (median of 7): {statistics.median(latencies) * 1000:,.1f} ms"
        )

        refs = [col.document(f"d{i}") for i in range(100)]
        reads = rate(2000, lambda i: refs[i % 100].get())
        print(f"point reads/s (2,000 sequential gets): {reads:,.0f}")

        now = dt.datetime.now(UTC)
        past = now - dt.timedelta(days=30)
        future = now + dt.timedelta(days=1)

        def mostly_done(i: int) -> dict[str, Any]:
            deferred = i % (TOTAL_DOCS // MATCHING) == 0
            return {
                "state": "deferred" if deferred else "completed",
                "due_at": past + dt.timedelta(seconds=i),
                "action": "media.delete_source",
                "attempt": 0,
            }

        def mostly_future(i: int) -> dict[str, Any]:
            due = i % (TOTAL_DOCS // MATCHING) == 0
            return {
                "state": "deferred",
                "due_at": (past if due else future) + dt.timedelta(seconds=i),
                "action": "media.delete_source",
                "attempt": 0,
            }

        for name, shape, describe in (
            ("jobs_a", mostly_done, "100 deferred among 199,900 completed"),
            ("jobs_b", mostly_future, "200,000 deferred, 100 of them due"),
        ):
            seconds = load(client, name, shape)
            first, median, count = query_latency(client, name, now)
            counted, count_s = count_latency(client, name)
            print(
                f"count() of state==deferred over {TOTAL_DOCS:,} docs ({describe}): "
                f"{counted:,} in {count_s * 1000:,.1f} ms"
            )
            print(
                f"query state==deferred and due_at<=now order by due_at limit 500 over "
                f"{TOTAL_DOCS:,} docs ({describe}; loaded in {seconds:,.1f} s): "
                f"{count} returned, first run {first * 1000:,.1f} ms, "
                f"median of 10 {median * 1000:,.1f} ms"
            )
        client.close()


if __name__ == "__main__":
    main()
