"""What the local Cloud Run front end costs a request: throughput and latency, direct vs fronted.

Starts the OIDC issuer and a trivial threaded werkzeug app (204 to every POST) on 127.0.0.1,
then sends N requests from C client threads, each with a fresh-enough invoker token, straight to
the app and then through a front end (invoker check with RS256 verification, signature strip,
trace header, concurrency C). Run: `.venv/bin/python -m tests.benchmarks cloudrun`
(JOBS_BENCH_CLOUDRUN_REQUESTS=N, JOBS_BENCH_CLOUDRUN_CLIENTS=C to change them).
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import requests
from werkzeug.serving import make_server

from emulators.cloudrun.invoker import InvokerCheck, InvokerPolicy, UrlCerts
from emulators.cloudrun.proxy import ServiceConfig, start
from emulators.oidc.server import start as start_oidc

INVOKER = "pusher@deferred-jobs.iam.gserviceaccount.com"


def _app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("204 No Content", [])
    return []


def _run(url: str, token: str, requests_n: int, clients: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()
    per_client = requests_n // clients

    def client() -> None:
        with requests.Session() as session:
            for _ in range(per_client):
                started = time.perf_counter()
                response = session.post(
                    url, data=b'{"message": {}}', headers={"Authorization": token}, timeout=30
                )
                elapsed = time.perf_counter() - started
                assert response.status_code == 204, response.status_code
                with lock:
                    latencies.append(elapsed)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies


def _report(label: str, seconds: float, latencies: list[float]) -> None:
    ordered = sorted(latencies)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    print(
        f"{label:>12}: {len(latencies)} requests in {seconds:.2f} s = "
        f"{len(latencies) / seconds:,.0f}/s; p50 {statistics.median(ordered) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms"
    )


def main() -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access line per request
    requests_n = int(os.environ.get("JOBS_BENCH_CLOUDRUN_REQUESTS", "2000"))
    clients = int(os.environ.get("JOBS_BENCH_CLOUDRUN_CLIENTS", "8"))
    server = make_server("127.0.0.1", 0, _app, threaded=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    upstream = f"http://127.0.0.1:{server.server_port}"
    with start_oidc() as oidc:

        def config(url: str) -> ServiceConfig:
            check = InvokerCheck(InvokerPolicy(url, frozenset({INVOKER})), UrlCerts(oidc.certs_url))
            return ServiceConfig("bench", check, concurrency=clients)

        front = start(config, upstream)
        try:
            print(f"{requests_n} POSTs from {clients} client threads")
            direct = "Bearer " + oidc.issuer.mint(upstream, INVOKER)
            _report("direct", *_run(upstream + "/", direct, requests_n, clients))
            fronted = "Bearer " + oidc.issuer.mint(front.url, INVOKER)
            _report("front end", *_run(front.url + "/", fronted, requests_n, clients))
            print(f"front end counters: forwarded {front.counters.forwarded}")
        finally:
            front.stop()
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    main()
