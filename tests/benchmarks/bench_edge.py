"""The HTTP edge under a burst and under hostile input, as deployed: the api (and the scan and
the worker) served by `services.edge.server` behind the local Cloud Run front end, on the
in-process Firestore, Pub/Sub and Storage emulators.

1. Burst: B connections opened at once through the front end (a barrier releases them
   together), each a schedule POST of its own job. Counted: resets and other connection
   errors (want 0), statuses (want only 201, or 429 from the front end's pending rule), and
   that the store holds exactly one job per 201.
2. Fuzz: N hostile requests, seeded, over raw sockets from C threads: malformed request lines
   and targets, chunk sizes (`-1`, `0x5`, 17 digits), Transfer-Encoding (`xchunked`,
   `gzip, chunked`, with Content-Length), short and conflicting Content-Lengths, header names
   and values with controls, fields over 8 KiB, 150 fields, non-UTF-8 paths, `%0A`, `//`,
   reserved paths, garbage and oversized JSON, due times of year 1 and 9999, no / garbage /
   expired / wrong-audience / stripped tokens, and a second allowlisted caller reading,
   cancelling, rescheduling and re-scheduling the first caller's jobs. Counted: answers
   outside Google's error model (JSON `{"error": {code, message, status}}`, or the front end's
   own HTML page with a front-end status), answers >= 500, requests left unanswered, and
   documents of the jobs collection changed (a snapshot before and after; want 0 everywhere).

Run: `.venv/bin/python -m tests.benchmarks edge` (JOBS_BENCH_EDGE_BURST=B, default 256;
JOBS_BENCH_EDGE_FUZZ=N, default 5000; JOBS_BENCH_EDGE_CLIENTS=C, default 16;
JOBS_BENCH_EDGE_SEED, default 26).
"""

from __future__ import annotations

import collections
import json
import os
import random
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

from google.cloud import firestore

from emulators.firestore import indexes
from emulators.firestore.server import start as start_firestore
from emulators.launcher import PROJECT_INDEXES
from emulators.oidc.server import start as start_oidc
from emulators.pubsub.server import start as start_pubsub
from emulators.storage.server import ENV_VAR as STORAGE_ENV
from emulators.storage.server import start as start_storage
from services.jobs import schema
from tests.integration.cloudrun.deployed import Deployed, deploy

CALLER = "producer@bench-edge.iam.gserviceaccount.com"
OTHER = "other-producer@bench-edge.iam.gserviceaccount.com"
FRONT_END_STATUSES = {400, 401, 403, 408, 413, 429, 431, 501, 503, 504}
ACTION = "media.delete_source"
PARAMS = {"bucket": "media-src", "objects": ["m/source.mp4"]}


def send(url: str, request: bytes, timeout_s: float = 60) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection; (status, headers, body), or raises OSError."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname and parts.port
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    if not data:
        raise ConnectionAbortedError("closed without an answer")
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/1.1 "):
        return 0, {}, data  # not an HTTP/1.1 answer at all: counted as outside
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def google_error(status: int, headers: dict[str, str], body: bytes, head: bool = False) -> bool:
    if not headers.get("content-type", "").startswith("application/json"):
        return False
    if head:
        return True  # an answer to HEAD has no body to check
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (
        isinstance(error, dict)
        and error.get("code") == status
        and isinstance(error.get("message"), str)
        and isinstance(error.get("status"), str)
    )


def front_end_page(status: int, headers: dict[str, str], body: bytes, head: bool = False) -> bool:
    html = headers.get("content-type", "").startswith("text/html") and (head or b"<title>" in body)
    return status in FRONT_END_STATUSES and (html or body == b"Rate exceeded.")


def _request(
    method: bytes,
    target: bytes,
    *,
    token: str | None = None,
    fields: bytes = b"",
    body: bytes = b"",
    framing: bytes | None = None,
) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n".encode() if token is not None else b""
    if framing is None:
        framing = b"Content-Length: %d\r\n" % len(body) if body or method == b"POST" else b""
    return (
        method
        + b" "
        + target
        + b" HTTP/1.1\r\nHost: x\r\n"
        + auth
        + fields
        + framing
        + b"Content-Type: application/json\r\n\r\n"
        + body
    )


class Hostile:
    """Seeded hostile requests against one deployment and its owner's job IDs."""

    def __init__(self, rng: random.Random, tokens: dict[str, str], owned: list[str]) -> None:
        self.rng = rng
        self.tokens = tokens
        self.owned = owned

    def token(self) -> str | None:
        return self.rng.choice([*self.tokens.values(), None])

    def job_path(self) -> bytes:
        return f"/v1/jobs/{urllib.parse.quote(self.rng.choice(self.owned), safe='')}".encode()

    def one(self) -> bytes:
        maker: Callable[[], bytes] = self.rng.choice(
            [
                self.framing,
                self.target,
                self.fields,
                self.body,
                self.ownership,
                self.request_line,
            ]
        )
        return maker()

    def framing(self) -> bytes:
        chunked = b"Transfer-Encoding: chunked\r\n"
        cases = [
            (chunked, b"-1\r\nabc\r\n0\r\n\r\n"),
            (chunked, b"0x5\r\nabcde\r\n0\r\n\r\n"),
            (chunked, b"0" * 17 + b"5\r\nabcde\r\n0\r\n\r\n"),
            (chunked, b"5\r\nabcdeXX"),
            (chunked, b"a\r\nabc"),
            (b"Transfer-Encoding: xchunked\r\n", b"5\r\nabcde\r\n0\r\n\r\n"),
            (b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"),
            (chunked + b"Content-Length: 5\r\n", b"5\r\nabcde\r\n0\r\n\r\n"),
            (b"Content-Length: 50\r\n", b"{}"),
            (b"Content-Length: 3\r\nContent-Length: 5\r\n", b"abcde"),
            (b"Content-Length: -1\r\n", b""),
            (b"Content-Length: 99999999999\r\n", b""),
        ]
        framing, body = self.rng.choice(cases)
        return _request(
            b"POST", b"/v1/jobs", token=self.tokens["caller"], framing=framing, body=body
        )

    def target(self) -> bytes:
        raw = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 8)))
        targets = [
            b"/v1/jobs/%FF%FE",
            b"/v1/jobs/x?q=%FF",
            b"/v1/jobs/a%0Ab",
            b"//v1/jobs",
            b"/v1//jobs",
            b"/robots.txt",
            b"/favicon.ico",
            b"*",
            b"/v1/jobs/" + urllib.parse.quote_from_bytes(raw).encode(),
            b"/v1/jobs/%zz",
            b"/" + b"a" * self.rng.choice([100, 5000, 70000]),
            b"/v1/jobs/x:unknownverb",
            b"/v1/openapi.json/../jobs",
        ]
        method = self.rng.choice([b"GET", b"POST", b"DELETE", b"PUT", b"OPTIONS", b"HEAD"])
        return _request(method, self.rng.choice(targets), token=self.token())

    def fields(self) -> bytes:
        cases = [
            b"Bad Name: y\r\n",
            b"X-A: a\x00b\r\n",
            b"X-A: a\x1bb\r\n",
            b"X-Pad: " + b"a" * self.rng.choice([9000, 20000, 70000]) + b"\r\n",
            b"".join(b"X-%d: y\r\n" % n for n in range(150)),
            b"Connection: Authorization\r\n",
            b"traceparent: 00-" + b"0" * 32 + b"-1-01\r\n",
            b" folded: continuation\r\n",
        ]
        return _request(b"GET", self.job_path(), token=self.token(), fields=self.rng.choice(cases))

    def body(self) -> bytes:
        garbage = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(0, 300)))
        bodies = [
            garbage,
            b"[" * 5000,
            b'{"job_id": "x", "job_id": "y"}',
            b'{"action": NaN}',
            json.dumps(
                {
                    "job_id": "far",
                    "action": ACTION,
                    "subject": "s",
                    "params": PARAMS,
                    "due_at": self.rng.choice(["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"]),
                }
            ).encode(),
            json.dumps(
                {
                    "job_id": "d",
                    "action": ACTION,
                    "subject": "s",
                    "params": PARAMS,
                    "delay": "999999999999s",
                }
            ).encode(),
            json.dumps({"job_id": "\ud800x", "action": ACTION}).encode(),
            b"{" + b'"a":1,' * 20000 + b'"b":2}',
        ]
        return _request(
            b"POST", b"/v1/jobs", token=self.tokens["caller"], body=self.rng.choice(bodies)
        )

    def ownership(self) -> bytes:
        other = self.tokens["other"]
        path = self.job_path()
        cases = [
            _request(b"GET", path, token=other),
            _request(b"POST", path + b":cancel", token=other, body=b"{}"),
            _request(
                b"POST",
                path + b":reschedule",
                token=other,
                body=b'{"due_at": "2030-01-01T00:00:00Z"}',
            ),
            _request(
                b"POST",
                b"/v1/jobs",
                token=other,
                body=json.dumps(
                    {
                        "job_id": self.rng.choice(self.owned),
                        "action": ACTION,
                        "subject": "media-1",
                        "params": PARAMS,
                        "due_at": "2030-01-01T00:00:00Z",
                    }
                ).encode(),
            ),
            _request(
                b"GET",
                path,
                token=self.rng.choice(
                    [
                        self.tokens["expired"],
                        self.tokens["wrong_audience"],
                        self.tokens["stripped"],
                        "garbage",
                        "a" * 20000,
                    ]
                ),
            ),
        ]
        return self.rng.choice(cases)

    def request_line(self) -> bytes:
        cases = [
            b"GET\r\n\r\n",
            b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n",
            b"G\x00T / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n",
            bytes(self.rng.randrange(256) for _ in range(64)) + b"\r\n\r\n",
        ]
        return self.rng.choice(cases)


def _snapshot(client: firestore.Client) -> dict[str, Any]:
    return {d.id: d.to_dict() for d in client.collection(schema.JOBS).stream()}


def _schedule_body(job_id: str) -> bytes:
    return json.dumps(
        {
            "job_id": job_id,
            "action": ACTION,
            "subject": "media-1",
            "params": PARAMS,
            "due_at": "2030-01-01T00:00:00Z",
        }
    ).encode()


def burst(api: Deployed, token: str, connections: int) -> dict[str, Any]:
    barrier = threading.Barrier(connections)
    statuses: collections.Counter[int] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    latencies: list[float] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        request = _request(b"POST", b"/v1/jobs", token=token, body=_schedule_body(f"burst-{index}"))
        barrier.wait()
        started = time.monotonic()
        try:
            status, _, _ = send(api.url, request, timeout_s=120)
            with lock:
                statuses[status] += 1
                latencies.append(time.monotonic() - started)
        except OSError as exc:
            with lock:
                errors[type(exc).__name__] += 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    return {
        "statuses": dict(statuses),
        "errors": dict(errors),
        "p50_s": latencies[len(latencies) // 2] if latencies else None,
        "max_s": latencies[-1] if latencies else None,
    }


def fuzz(
    targets: dict[str, Deployed], hostile: Hostile, count: int, clients: int
) -> dict[str, Any]:
    requests_ = [
        (hostile.rng.choice(["api"] * 8 + ["scan", "worker"]), hostile.one()) for _ in range(count)
    ]
    outside: list[tuple[str, int, bytes]] = []
    five_xx: list[tuple[str, int, bytes]] = []
    unanswered: collections.Counter[str] = collections.Counter()
    unanswered_examples: list[tuple[str, str, bytes]] = []
    kinds: collections.Counter[str] = collections.Counter()
    statuses: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()
    cursor = iter(range(count))

    def worker() -> None:
        while True:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            target, request = requests_[index]
            try:
                status, headers, body = send(targets[target].url, request, timeout_s=120)
            except OSError as exc:
                with lock:
                    unanswered[type(exc).__name__] += 1
                    if sum(1 for e in unanswered_examples if e[0] == type(exc).__name__) < 3:
                        unanswered_examples.append((type(exc).__name__, target, request[:100]))
                continue
            head = request.startswith(b"HEAD ")
            kind = (
                "2xx"
                if 200 <= status < 300
                else "google"
                if google_error(status, headers, body, head)
                else "front end"
                if front_end_page(status, headers, body, head)
                else "outside"
            )
            with lock:
                kinds[kind] += 1
                statuses[status] += 1
                if kind == "outside":
                    outside.append((target, status, request[:120]))
                if status >= 500:
                    five_xx.append((target, status, request[:120]))

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "kinds": dict(kinds),
        "statuses": dict(sorted(statuses.items())),
        "unanswered": dict(unanswered),
        "unanswered_examples": unanswered_examples,
        "outside": outside[:5],
        "outside_count": len(outside),
        "five_xx": five_xx[:5],
        "five_xx_count": len(five_xx),
    }


def main() -> None:
    burst_n = int(os.environ.get("JOBS_BENCH_EDGE_BURST", "256"))
    fuzz_n = int(os.environ.get("JOBS_BENCH_EDGE_FUZZ", "5000"))
    clients = int(os.environ.get("JOBS_BENCH_EDGE_CLIENTS", "16"))
    seed = int(os.environ.get("JOBS_BENCH_EDGE_SEED", "26"))
    project = f"bench-edge-{uuid.uuid4().hex[:8]}"
    oidc = start_oidc()
    store = start_firestore(
        host="127.0.0.1", port=0, admin_port=0, indexes=indexes.load(PROJECT_INDEXES)
    )
    pubsub = start_pubsub(issuer=oidc.issuer)
    os.environ["FIRESTORE_EMULATOR_HOST"] = store.address
    os.environ["PUBSUB_EMULATOR_HOST"] = pubsub.address
    deployed: dict[str, Deployed] = {}
    with start_storage() as storage:
        os.environ[STORAGE_ENV] = storage.url
        try:
            for target in ("api", "scan", "worker"):
                deployed[target] = deploy(target, project, oidc.certs_url, invokers=(CALLER, OTHER))
            api = deployed["api"]
            client = firestore.Client(project=project)
            caller_token = oidc.issuer.mint(api.url, CALLER)
            print(
                f"burst: {burst_n} connections at once through the front end (api, "
                f"concurrency 80, THREADS 80)",
                flush=True,
            )
            result = burst(api, caller_token, burst_n)
            jobs = _snapshot(client)
            created = result["statuses"].get(201, 0)
            print(
                f"  statuses {result['statuses']}, connection errors {result['errors'] or 0}, "
                f"p50 {result['p50_s']:.2f} s, max {result['max_s']:.2f} s; "
                f"jobs stored {len(jobs)} for {created} answers 201",
                flush=True,
            )
            owned = sorted(jobs)
            tokens = {
                "caller": caller_token,
                "other": oidc.issuer.mint(api.url, OTHER),
                "expired": oidc.issuer.mint(
                    api.url, CALLER, now=time.time() - 7200, lifetime_s=600
                ),
                "wrong_audience": oidc.issuer.mint("https://other.a.run.app", CALLER),
                "stripped": caller_token.rsplit(".", 1)[0] + ".SIGNATURE_REMOVED_BY_GOOGLE",
            }
            before = _snapshot(client)
            print(
                f"fuzz: {fuzz_n} hostile requests, seed {seed}, {clients} client threads "
                f"(80 % api, 10 % scan, 10 % worker)",
                flush=True,
            )
            found = fuzz(deployed, Hostile(random.Random(seed), tokens, owned), fuzz_n, clients)
            after = _snapshot(client)
            changed = sum(1 for k in set(before) | set(after) if before.get(k) != after.get(k))
            print(f"  answers by kind {found['kinds']}", flush=True)
            print(f"  statuses {found['statuses']}", flush=True)
            print(
                f"  outside Google's error model: {found['outside_count']} {found['outside']}",
                flush=True,
            )
            print(f"  >= 500: {found['five_xx_count']} {found['five_xx']}", flush=True)
            print(
                f"  unanswered: {sum(found['unanswered'].values())} {found['unanswered']} "
                f"{found['unanswered_examples']}",
                flush=True,
            )
            print(f"  job records changed: {changed} of {len(before)}", flush=True)
        finally:
            for service in deployed.values():
                service.stop()
            pubsub.stop()
            store.stop()
            oidc.stop()


if __name__ == "__main__":
    main()
