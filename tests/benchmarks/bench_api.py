"""Schedule API throughput and cost: requests/s, latency and billed Firestore operations per call.

Starts the Firestore emulator and the OIDC issuer in this process and the API (werkzeug,
threaded) on 127.0.0.1, then sends N new schedules from C client threads (each with a real
token verified against the issuer), the same N again (idempotent repeats: 200), and N reads.
Firestore's counters are reset before each phase, so the reads and writes per call are the
API's alone.
Run: `.venv/bin/python -m tests.benchmarks api` (JOBS_BENCH_API_CALLS=N, JOBS_BENCH_API_CLIENTS=C).
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import requests
from werkzeug.serving import make_server

CALLER = "producer@bench.iam.gserviceaccount.com"
DEFAULT_CALLS = 400
DEFAULT_CLIENTS = 8

Sender = Callable[[requests.Session, int], requests.Response]


def main() -> None:
    from emulators.firestore.server import start as start_firestore
    from emulators.oidc.server import start as start_oidc
    from services.api.app import create_app
    from services.api.settings import ApiSettings
    from services.telemetry.log import configure_logging

    calls = int(os.environ.get("JOBS_BENCH_API_CALLS", DEFAULT_CALLS))
    clients = int(os.environ.get("JOBS_BENCH_API_CLIENTS", DEFAULT_CLIENTS))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    configure_logging("INFO", stream=devnull)  # the API logs one JSON line per request
    project = "bench-api"
    with start_oidc() as oidc:
        firestore = start_firestore(host="127.0.0.1", port=0, admin_port=0)
        os.environ["FIRESTORE_EMULATOR_HOST"] = firestore.address
        try:
            server = make_server("127.0.0.1", 0, lambda e, s: holder["app"](e, s), threaded=True)
            url = f"http://127.0.0.1:{server.server_port}"
            holder: dict[str, Any] = {}
            settings = ApiSettings(project, url, frozenset({CALLER}), certs_url=oidc.certs_url)
            holder["app"] = create_app(settings)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            token = oidc.issuer.mint(url, CALLER)

            def phase(name: str, send: Sender) -> None:
                firestore.reset_stats(project)
                statuses, latencies, elapsed = _drive(calls, clients, send)
                stats = firestore.stats(project)
                print(
                    f"{name}: {calls} calls, {clients} clients: {calls / elapsed:.0f}/s; "
                    f"p50 {_ms(latencies, 50)} ms, p99 {_ms(latencies, 99)} ms; "
                    f"statuses {dict(statuses)}; per call {_per(stats, calls)}",
                    flush=True,
                )

            headers = {"Authorization": f"Bearer {token}"}

            def schedule(session: requests.Session, n: int) -> requests.Response:
                body: dict[str, Any] = {
                    "job_id": f"job-{n:06d}",
                    "action": "media.delete_source",
                    "subject": f"media-{n}",
                    "params": {"bucket": "b", "objects": [f"media-{n}/source.mp4"]},
                    "due_at": "2027-01-01T00:00:00Z",
                }
                return session.post(f"{url}/v1/jobs", json=body, headers=headers, timeout=30)

            def read(session: requests.Session, n: int) -> requests.Response:
                return session.get(f"{url}/v1/jobs/job-{n:06d}", headers=headers, timeout=30)

            phase("new schedules (201)", schedule)
            phase("repeated schedules (200)", schedule)
            phase("reads (200)", read)
            server.shutdown()
        finally:
            firestore.stop()
            devnull.close()


def _drive(calls: int, clients: int, send: Sender) -> tuple[Counter[int], list[float], float]:
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()
    numbers = iter(range(calls))

    def client() -> None:
        with requests.Session() as session:
            while True:
                with lock:
                    n = next(numbers, None)
                if n is None:
                    return
                started = time.perf_counter()
                status = send(session, n).status_code
                with lock:
                    latencies.append(time.perf_counter() - started)
                    statuses[status] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses, latencies, time.perf_counter() - started


def _ms(latencies: list[float], percentile: int) -> str:
    cut = statistics.quantiles(latencies, n=100)[percentile - 1] if len(latencies) > 1 else 0.0
    return f"{cut * 1000:.1f}"


def _per(stats: dict[str, Any], calls: int) -> str:
    billed = ("document_reads", "document_writes", "document_deletes")
    return ", ".join(f"{stats[k] / calls:.2f} {k.removeprefix('document_')}" for k in billed)
