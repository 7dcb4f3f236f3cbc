"""The fault drain: one drain of N media deletions through every fault at once, finished.

What runs (all on 127.0.0.1, each part as `python -m services.local` runs it):

- `python -m emulators --data-dir D` in its own process group, on fixed free ports;
- the scan behind the local Cloud Run front end, triggered by the local Cloud Scheduler at a
  TEST CADENCE (every `CADENCE_S` s; Cloud Scheduler cannot fire more than once a minute);
- two instances of the worker (`services.edge.server --target=worker`), each behind its own
  local Cloud Run front end, both accepting the one service audience; the push subscription
  delivers to instance A until A is frozen, then to B (Cloud Run's load balancer sending new
  requests to the instance that answers);
- before each worker instance, a storage tap (tests/benchmarks/storage_tap.py: records every
  object read and delete); before both, the terminal-write fault proxy for Firestore
  (tests/benchmarks/terminal_faults.py).

N jobs are scheduled through the store (`schedule_many`, due now) with one real object each.
Faults, in one run:

1. every terminal write (complete / fail / release / retry_later / cancel_running) fails its
   first attempt: UNAVAILABLE (not applied) and DEADLINE_EXCEEDED after the commit applied,
   alternately;
2. when a fifth of the jobs completed, instance A is frozen (SIGSTOP to its process group:
   front end, server and its threads) right after an action read an object's generation and
   before it sent the delete; it stays frozen well past its lease (TEST SETTING
   `LEASE_S`) and the push ack deadline (TEST SETTING `ACK_DEADLINE_S`), so B takes those
   jobs over;
3. while A is frozen, when two fifths completed, the emulator process gets SIGKILL and is
   started again on the same data directory and ports;
4. once B has completed the jobs A held, their objects are uploaded again (a customer restoring
   the video), and so are the objects of `REUPLOADS` other completed jobs; then A gets
   SIGCONT, and sends the deletes and writes it was about to send;
5. the drain runs until every job is terminal and both instances are idle.

Then it prints:

- jobs lost: gone, or not `completed` and not `failed` for a permanent reason of the action
  (expect 0);
- side effects repeated on a different generation: a re-uploaded object gone, an object
  deleted successfully more than once, or a successful delete not conditioned on the
  generation read (expect 0);
- acknowledged writes missing: a job `schedule` acknowledged whose record is gone, an upload
  acknowledged whose object is gone with no job having deleted it, a terminal write the worker
  got OK for (completed or failed) that the record does not show (expect 0);
- the faults injected by kind, the SIGKILL and SIGSTOP timings, and the worker outcomes.

With JOBS_BENCH_FAULTDRAIN_WRITE_FAULTS=1 (issue 33), on top of all that, every kind of write
the scan, both workers and the producer send meets ABORTED and UNAVAILABLE (the proxy's
`write_faults`: transaction commits, conditional writes, creates, plain writes, BatchWrite),
and each worker instance's answers to Pub/Sub are counted by a tap between the push and its
front end (tests/benchmarks/answer_tap.py): answers outside 2xx/429/503 (expect 0).

Size: JOBS_BENCH_FAULTDRAIN_JOBS (default 150); JOBS_BENCH_FAULTDRAIN_DIR keeps the data
directory and every process's log there (default: a temporary directory). Run:
`.venv/bin/python -m tests.benchmarks faultdrain`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.benchmarks import rig
from tests.benchmarks.answer_tap import NO_ANSWER, AnswerTap, within_contract
from tests.benchmarks.storage_tap import Outages, StorageTap
from tests.benchmarks.terminal_faults import TerminalFaults, TerminalWrite

PROJECT = "fault-drain"
BUCKET = "fault-drain-media"
DEFAULT_JOBS = 150
# TEST SETTINGS: short enough that the drain, a freeze past the lease and a crash fit in a few
# minutes. None of these is a production value (docs/worker.md, docs/scan.md give those).
LEASE_S = 10  # JOBS_WORKER_LEASE_S (default 60)
ACK_DEADLINE_S = 20  # the push subscription's ack deadline (infra: pushAckDeadlineS)
CADENCE_S = 2.0  # the local Cloud Scheduler's test cadence (Cloud Scheduler: every minute)
MAX_PER_RUN = 5  # JOBS_SCAN_MAX_PER_RUN: a slow drain, so the faults land in its middle
CLAIM_TIMEOUT_S = 30  # JOBS_CLAIM_TIMEOUT_S (default 600)
TIME_BUDGET_S = 5  # JOBS_SCAN_TIME_BUDGET_S
PUBLISH_TIMEOUT_S = 10  # JOBS_SCAN_PUBLISH_TIMEOUT_S
RETRY_LATER_DELAY_S = 60  # JOBS_RETRY_LATER_DELAY_S, its minimum
FREEZE_AT, KILL_AT = 0.2, 0.4  # fractions of the jobs completed
FREEZE_AT_LEAST_S = 2.5 * LEASE_S
REUPLOADS = 10
RETRY_LATER_AFTER_ATTEMPTS = 2  # JOBS_WORKER_RETRY_LATER_AFTER_ATTEMPTS (default 5)
# Jobs that meet their own action's faults, so every kind of terminal write happens:
RELEASE_EVERY = 10  # the first delivery's deletes answer 503: released, redelivered
RETRY_LATER_EVERY = 25  # the first two deliveries' deletes answer 503: deferred (retry_later)
FAIL_EVERY = 50  # params name another bucket than the worker's: failed, permanent (fail)
OTHER_BUCKET = "another-media-bucket"
DRAIN_TIMEOUT_S = 600.0
CRASH_WAIT_S = 60.0  # for a terminal write to crash on
HOST = "127.0.0.1"
WRITE_FAULT_MAX_ATTEMPTS = 10  # max_attempts of the jobs of a drain with write faults (default 5)
# Outcomes the worker answers outside 2xx/429/503 (services/worker/app.py): counted from the
# logs too, since a frozen instance's answer never reaches Pub/Sub (nor the answer tap).
_OUTSIDE_CONTRACT_OUTCOMES = ("store_rejected", "internal_error")


def main() -> None:
    count = int(os.environ.get("JOBS_BENCH_FAULTDRAIN_JOBS", DEFAULT_JOBS))
    kept = os.environ.get("JOBS_BENCH_FAULTDRAIN_DIR")  # keep the data and logs there
    write_faults = os.environ.get("JOBS_BENCH_FAULTDRAIN_WRITE_FAULTS", "") == "1"
    per_run = int(os.environ.get("JOBS_BENCH_FAULTDRAIN_PER_RUN", MAX_PER_RUN))
    with tempfile.TemporaryDirectory() as folder:
        drain = FaultDrain(count, Path(kept or folder), write_faults=write_faults, per_run=per_run)
        report = drain.run()
    print(report.text())


@dataclass
class Report:
    """The figures of one fault drain."""

    count: int
    elapsed_s: float = 0.0
    states: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    legit_failed: list[str] = field(default_factory=list)
    reuploads_removed: list[str] = field(default_factory=list)
    deleted_twice: list[str] = field(default_factory=list)
    unfenced_deletes: list[str] = field(default_factory=list)
    missing_schedules: list[str] = field(default_factory=list)
    missing_uploads: list[str] = field(default_factory=list)
    missing_terminal: list[str] = field(default_factory=list)
    missing_after_restart: list[str] = field(default_factory=list)
    acknowledged_terminal: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    faults_by_state: Counter[str] = field(default_factory=Counter)
    kill: dict[str, Any] = field(default_factory=dict)
    freeze: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    refused_412: int = 0
    storage_unreachable: int = 0
    storage_injected: int = 0
    stalled: str = ""  # why the drain did not finish ("" when it did)
    per_run: int = MAX_PER_RUN
    # With write faults: (kind of write, status) -> faults injected; each worker instance's
    # answers to Pub/Sub by status; the producer's retries of a refused schedule batch.
    write_faults: Counter[tuple[str, str]] = field(default_factory=Counter)
    answers: dict[str, Counter[int | str]] = field(default_factory=dict)
    schedule_retries: int = 0

    @property
    def outside_contract(self) -> int:
        """Worker answers other than 2xx, 429 and 503 (expect 0): those Pub/Sub got, and the
        outcomes the workers logged that are answered so (one no caller waited for too)."""
        received = sum(
            n
            for counted in self.answers.values()
            for status, n in counted.items()
            if status != NO_ANSWER and not within_contract(status)
        )
        return max(received, self.outside_contract_logged)

    @property
    def refused_unauthenticated(self) -> int:
        """401s: the local Cloud Run front end's invoker check refusing a push token (seen
        while the SIGKILLed emulators, which host the OIDC issuer Pub/Sub's push tokens come
        from, restart). Not the worker's answer to a write fault; counted apart."""
        return sum(counted[401] for counted in self.answers.values())

    @property
    def outside_contract_logged(self) -> int:
        return sum(
            counted[outcome]
            for counted in self.outcomes.values()
            for outcome in _OUTSIDE_CONTRACT_OUTCOMES
        )

    @property
    def faults_by_write(self) -> Counter[str]:
        """The faults by the store call that wrote them (told apart by the state written)."""
        return Counter({_WRITES.get(s, s): n for s, n in self.faults_by_state.items()})

    @property
    def repeated(self) -> int:
        return len(self.reuploads_removed) + len(self.deleted_twice) + len(self.unfenced_deletes)

    @property
    def missing(self) -> int:
        return (
            len(self.missing_schedules)
            + len(self.missing_uploads)
            + len(self.missing_terminal)
            + len(self.missing_after_restart)
        )

    def text(self) -> str:
        faults = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items()))
        by_write = ", ".join(f"{w} {n}" for w, n in sorted(self.faults_by_write.items()))
        outcomes = "; ".join(
            f"{name}: " + ", ".join(f"{k} {n}" for k, n in sorted(c.items()))
            for name, c in self.outcomes.items()
        )
        lines = [
            f"fault drain, {self.count} jobs, {self.elapsed_s:.0f} s (TEST SETTINGS: lease "
            f"{LEASE_S} s, push ack deadline {ACK_DEADLINE_S} s, scan every {CADENCE_S:g} s, "
            f"{self.per_run} per run, claim timeout {CLAIM_TIMEOUT_S} s, retry later after "
            f"{RETRY_LATER_AFTER_ATTEMPTS} deliveries, {RETRY_LATER_DELAY_S} s later)",
            f"  drain finished: {'yes' if not self.stalled else 'NO, ' + self.stalled}",
            f"  jobs lost: {len(self.lost)} (expect 0) {self.lost[:10]}",
            f"  side effects repeated on a different generation: {self.repeated} (expect 0): "
            f"re-uploaded objects removed {len(self.reuploads_removed)}, objects deleted "
            f"more than once {len(self.deleted_twice)}, unconditioned deletes "
            f"{len(self.unfenced_deletes)}; stale deletes refused by the generation fence "
            f"(412) {self.refused_412}",
            f"  acknowledged writes missing: {self.missing} (expect 0): schedules "
            f"{len(self.missing_schedules)}, uploads {len(self.missing_uploads)}, terminal "
            f"writes acknowledged to the worker {len(self.missing_terminal)} of "
            f"{self.acknowledged_terminal}, completions acknowledged before the SIGKILL and "
            f"not completed just after the restart {len(self.missing_after_restart)}",
            f"  final states {dict(self.states)}; legitimately failed {len(self.legit_failed)} "
            f"(params naming another bucket: a permanent error, 1 job in {FAIL_EVERY})",
            f"  faults on terminal writes: {faults} (by write: {by_write})",
            f"  SIGKILL of the emulators: {self.kill}",
            f"  SIGSTOP of worker A: {self.freeze}",
            f"  deletes answered 503 by the storage taps: {self.storage_injected} injected, "
            f"{self.storage_unreachable} while the emulator was down",
            f"  worker outcomes (from their logs): {outcomes}",
        ]
        if self.write_faults or self.answers:
            written = ", ".join(
                f"{kind} {code} {n}" for (kind, code), n in sorted(self.write_faults.items())
            )
            answers = "; ".join(
                f"{name}: " + ", ".join(f"{k} {n}" for k, n in sorted(c.items(), key=str))
                for name, c in self.answers.items()
            )
            lines += [
                f"  faults on every kind of write: {written}; schedule batches the producer "
                f"sent again {self.schedule_retries}",
                f"  worker answers to Pub/Sub: {answers}",
                f"  answers outside 2xx/429/503: {self.outside_contract} (expect 0; "
                f"{self.outside_contract_logged} by the workers' logs; of them 401 from the "
                f"front end's invoker check {self.refused_unauthenticated})",
            ]
        return "\n".join(lines)


# The state each terminal write leaves (services/jobs/transitions.py) -> the store call.
_WRITES = {
    "completed": "complete",
    "failed": "fail",
    "enqueued": "release",
    "deferred": "retry_later",
    "cancelled": "cancel_running",
}


class Stalled(RuntimeError):
    """The drain cannot finish (its records are gone, or a phase timed out)."""


class FaultDrain:
    """One run; `run()` returns its Report and leaves nothing running."""

    def __init__(
        self,
        count: int,
        folder: Path,
        *,
        retry_later: bool = True,
        write_faults: bool = False,
        per_run: int = MAX_PER_RUN,
    ) -> None:
        """`retry_later` False: no job meets the outage that defers it (RETRY_LATER_DELAY_S,
        at least 60 s, would then be most of a small drain's time). `write_faults`: every kind
        of write meets ABORTED and UNAVAILABLE too, the scan's and the producer's included,
        and the workers' answers are counted."""
        from emulators.launcher import free_port
        from services.edge.resource_names import Names
        from services.local.stack import Supervisor
        from services.local.topology import Topology

        self.count = count
        self.retry_later = retry_later
        self.write_faults = write_faults
        # JOBS_BENCH_FAULTDRAIN_PER_RUN: jobs per scan run (a larger drain needs more), and
        # each phase's wait grows with the drain (the sizes above 150 take longer).
        self.per_run = per_run
        self.phase_s = max(300.0, 1.5 * count)
        self.answer_taps: dict[str, AnswerTap] = {}
        self.data = folder / "data"
        self.logs = folder / "logs"
        self.supervisor = Supervisor(self.logs)
        self.topology = Topology(PROJECT, Names.for_prefix())
        self.emulator_ports: list[str] = []
        for flag in ("firestore", "firestore-admin", "pubsub", "pubsub-admin", "oidc", "storage"):
            self.emulator_ports += [f"--{flag}-port", str(free_port(HOST))]
        self.ports = {name: free_port(HOST) for name in ("scan", "worker-a", "worker-b")}
        self.emulators: subprocess.Popen[str] | None = None
        self.exports: dict[str, str] = {}
        self.ids = [f"fd-{n:05d}" for n in range(count)]
        self.report = Report(count, per_run=per_run)
        self.uploaded: dict[str, str] = {}  # object -> generation acknowledged
        self.reuploaded: dict[str, str] = {}  # object -> generation of the re-upload
        self.children: dict[str, Any] = {}  # name -> services.local.stack.Child
        self.frozen = threading.Event()
        self.frozen_object = ""
        self._closers: list[Callable[[], None]] = []

    # -- the run --------------------------------------------------------------------------

    def run(self) -> Report:
        started = time.monotonic()
        try:
            self._start_emulators()
            self._start_proxy()
            self._seed()
            self._start_services()
            self._drain()
        finally:
            for close in reversed(self._closers):
                with contextlib.suppress(Exception):
                    close()
            self.supervisor.stop_all()
            self._stop_emulators()
        self.report.elapsed_s = time.monotonic() - started
        return self.report

    def _start_emulators(self) -> None:
        from emulators.launcher import PROJECT_INDEXES

        command = [sys.executable, "-m", "emulators", "--data-dir", str(self.data)]
        command += [*self.emulator_ports, "--project", PROJECT]
        command += ["--firestore-indexes", PROJECT_INDEXES]
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / "emulators.log").open("ab") as log:
            self.emulators = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, text=True, process_group=0
            )
        launched = rig._launched(self.emulators)
        self.exports = launched.exports
        os.environ.update(launched.exports)

    def _stop_emulators(self) -> None:
        if self.emulators is None:
            return
        if self.emulators.poll() is None:
            self.emulators.terminate()
            try:
                self.emulators.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.emulators.kill()
                self.emulators.wait()
        if self.emulators.stdout is not None:
            self.emulators.stdout.close()

    def _seed(self) -> None:
        import google.cloud.storage as storage
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import firestore

        from services.jobs.clock import SystemClock
        from services.jobs.model import NewJob
        from services.jobs.record import DEFAULT_MAX_ATTEMPTS
        from services.store.job_store import FirestoreJobStore

        self.client = firestore.Client(project=PROJECT)
        self._closers.append(self.client.close)
        self.store = FirestoreJobStore(self.client, SystemClock())
        producer = self.store
        direct = os.environ["FIRESTORE_EMULATOR_HOST"]
        if self.write_faults:
            # The producer's writes go through the proxy too (its creates meet the faults);
            # its store opens its channel at its first call, from the environment then.
            os.environ["FIRESTORE_EMULATOR_HOST"] = self.faults_address
            faulted = firestore.Client(project=PROJECT)
            self._closers.append(faulted.close)
            producer = FirestoreJobStore(faulted, SystemClock())
        self.gcs = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
        self._closers.append(self.gcs.close)
        self.bucket = self.gcs.create_bucket(BUCKET)
        for job_id in self.ids:
            blob = self.bucket.blob(f"src/{job_id}")
            blob.upload_from_string(b"source")
            self.uploaded[blob.name] = str(blob.generation)
        now = datetime.now(UTC)
        # Under write faults a delivery whose write-ahead or outcome write keeps failing
        # spends its retry cycles (a transient error, then retry_later): more cycles, so what
        # is measured is the faults' answers, not the retry budget (TEST SETTING).
        attempts = WRITE_FAULT_MAX_ATTEMPTS if self.write_faults else DEFAULT_MAX_ATTEMPTS
        news = [
            NewJob(
                job_id,
                rig.ACTION,
                f"media-{job_id}",
                now,
                self._params(n, job_id),
                max_attempts=attempts,
            )
            for n, job_id in enumerate(self.ids)
        ]
        refused = []
        # Smaller batches under write faults, so creates meet both ABORTED and UNAVAILABLE.
        size = 25 if self.write_faults else 500
        try:
            for first in range(0, len(news), size):
                batch = news[first : first + size]
                for new, outcome in zip(batch, self._schedule(producer, batch), strict=True):
                    if isinstance(outcome, Exception):
                        refused.append(f"{new.job_id}: {outcome}")
        finally:
            os.environ["FIRESTORE_EMULATOR_HOST"] = direct
        if refused:
            raise RuntimeError(f"seeding refused {len(refused)}: {refused[:3]}")

    def _schedule(self, producer: Any, batch: list[Any]) -> list[Any]:
        """`schedule_many`, sent again while Firestore answers UNAVAILABLE or contention, as a
        producer does (scheduling is idempotent by the decision)."""
        from services.jobs.errors import LostRace, StoreUnavailable

        for _ in range(20):
            try:
                return list(producer.schedule_many(batch))
            except (StoreUnavailable, LostRace):
                self.report.schedule_retries += 1
                time.sleep(0.2)
        return list(producer.schedule_many(batch))

    def _start_proxy(self) -> None:
        faults = TerminalFaults(
            self.exports["FIRESTORE_EMULATOR_HOST"], write_faults=self.write_faults
        )
        self.faults_address = faults.start()
        self.faults = faults
        self._closers.append(faults.stop)

    @staticmethod
    def _params(n: int, job_id: str) -> dict[str, Any]:
        params: dict[str, Any] = {"objects": [f"src/{job_id}"]}
        if n % FAIL_EVERY == 5:
            params["bucket"] = OTHER_BUCKET
        return params

    def _outages(self) -> Outages:
        plan = {}
        for n, job_id in enumerate(self.ids):
            if self.retry_later and n % RETRY_LATER_EVERY == 7:
                plan[f"src/{job_id}"] = 2
            elif n % RELEASE_EVERY == 3:
                plan[f"src/{job_id}"] = 1
        return Outages(plan)

    def _start_services(self) -> None:
        from google.cloud import pubsub_v1

        from emulators.oidc.server import CERTS_PATH, TOKEN_PATH
        from emulators.scheduler.attempt import token_from_issuer_url
        from emulators.scheduler.job import HttpJob
        from emulators.scheduler.retry import RetryConfig
        from emulators.scheduler.scheduler import CloudScheduler
        from services.edge import scan_deployment
        from services.edge import settings as common_keys
        from services.local.stack import port_accepts
        from services.local.topology import PushPolicy, create_topology
        from services.scan import cadence
        from services.scan import settings as scan_keys
        from services.worker import settings as worker_keys

        faults_address = self.faults_address
        storage_url = self.exports["STORAGE_EMULATOR_HOST"]
        outages = self._outages()
        self.outages = outages
        self.taps = {name: StorageTap(storage_url, name, outages) for name in ("A", "B")}
        for tap in self.taps.values():
            tap.start()
            self._closers.append(tap.stop)

        self.urls = {name: f"http://{HOST}:{port}" for name, port in self.ports.items()}
        audience = self.urls["worker-a"]  # the one service URL both instances answer for
        certs_url = self.exports[common_keys.OIDC_CERTS_URL]
        common = {
            **{k: v for k, v in os.environ.items() if not k.startswith(common_keys.PREFIX)},
            **self.exports,
            common_keys.PROJECT: PROJECT,
            common_keys.LOG_LEVEL: "INFO",
            common_keys.BEHIND_CLOUD_RUN_IAM: "true",
            "PYTHONUNBUFFERED": "1",
        }
        for name, tap in (("worker-a", self.taps["A"]), ("worker-b", self.taps["B"])):
            env = {
                **common,
                "FIRESTORE_EMULATOR_HOST": faults_address,
                "STORAGE_EMULATOR_HOST": tap.url,
                worker_keys.WORKER_AUDIENCE: audience,
                worker_keys.WORKER_ALLOWED_INVOKERS: self.topology.pusher_email,
                worker_keys.MEDIA_BUCKET: BUCKET,
                worker_keys.WORKER_LEASE_S: str(LEASE_S),
                worker_keys.RETRY_LATER_DELAY_S: str(RETRY_LATER_DELAY_S),
                worker_keys.WORKER_RETRY_LATER_AFTER_ATTEMPTS: str(RETRY_LATER_AFTER_ATTEMPTS),
            }
            self._start_service("worker", name, env, certs_url, audience)
        scan_env = {
            **common,
            scan_deployment.TOPIC: self.topology.names.topic,
            scan_keys.SCAN_AUDIENCE: self.urls["scan"],
            scan_keys.SCAN_ALLOWED_INVOKERS: self.topology.scheduler_email,
            scan_deployment.SCAN_INTERVAL_S: f"{CADENCE_S:g}",
            scan_deployment.SCAN_MAX_PER_RUN: str(self.per_run),
            scan_deployment.CLAIM_TIMEOUT_S: str(CLAIM_TIMEOUT_S),
            scan_deployment.SCAN_TIME_BUDGET_S: str(TIME_BUDGET_S),
            scan_keys.SCAN_PUBLISH_TIMEOUT_S: str(PUBLISH_TIMEOUT_S),
            scan_keys.METRICS: "log",
        }
        if self.write_faults:
            scan_env["FIRESTORE_EMULATOR_HOST"] = faults_address
        self._start_service("scan", "scan", scan_env, certs_url, self.urls["scan"])
        for name, port in self.ports.items():
            child = self.children[name]
            self.supervisor.wait_until(
                child, functools.partial(port_accepts, port), timeout_s=90, what="listening"
            )
        if self.write_faults:
            for name in ("worker-a", "worker-b"):
                answers = AnswerTap(self.urls[name], timeout_s=ACK_DEADLINE_S + 5)
                answers.start()
                self._closers.append(answers.stop)
                self.answer_taps[name] = answers

        self.publisher = pubsub_v1.PublisherClient()
        self._closers.append(self.publisher.stop)
        self.subscriber = pubsub_v1.SubscriberClient()
        self._closers.append(self.subscriber.close)
        create_topology(
            self.topology,
            audience,
            self.publisher,
            self.subscriber,
            PushPolicy(ack_deadline_s=ACK_DEADLINE_S),
        )
        job = HttpJob(
            name=f"projects/{PROJECT}/locations/europe-west1/jobs/"
            f"{self.topology.names.scheduler_job}",
            uri=self.urls["scan"],
            oidc_service_account_email=self.topology.scheduler_email,
            schedule=cadence.DEFAULT_SCHEDULE,
            time_zone=cadence.DEFAULT_TIME_ZONE,
            attempt_deadline_s=cadence.DEFAULT_ATTEMPT_DEADLINE_S,
            retry=RetryConfig(retry_count=cadence.DEFAULT_RETRY_COUNT),
            test_cadence_s=CADENCE_S,
        )
        token_url = certs_url.replace(CERTS_PATH, TOKEN_PATH)
        scheduler = CloudScheduler(job, token_from_issuer_url(token_url)).start()
        scheduler.run_now()
        self._closers.append(scheduler.stop)

    def _start_service(
        self, target: str, name: str, env: dict[str, str], certs_url: str, audience: str
    ) -> None:
        from services.local.cloud_run import deployments, front_end_argv
        from services.local.system import ROOT

        container = [
            sys.executable,
            "-m",
            "services.edge.server",
            f"--target={target}",
            f"--source={ROOT / 'services' / target / 'main.py'}",
            f"--host={HOST}",
        ]
        argv = front_end_argv(
            deployments(self.topology)[target],
            container,
            host=HOST,
            port=self.ports[name],
            certs_url=certs_url,
        )
        split = argv.index("--")
        argv[split:split] = [f"--audience={audience}"]
        self.children[name] = self.supervisor.start(name, argv, env=env)

    # -- the drain and its faults ---------------------------------------------------------

    def _states(self) -> dict[str, Any]:
        """Each job's record (None: gone), read in batches; {} while Firestore is down."""
        from services.jobs.errors import JobsError

        try:
            return {job_id: self.store.get(job_id) for job_id in self.ids}
        except JobsError:
            return {}

    def _completed(self, records: dict[str, Any]) -> set[str]:
        from services.jobs.state import State

        return {j for j, job in records.items() if job and job.state is State.COMPLETED}

    def _wait(self, what: str, done: Callable[[dict[str, Any]], bool], timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, child in self.children.items():
                if child.process.poll() is not None:
                    raise RuntimeError(f"{name} exited:\n{child.log_tail()}")
            records = self._states()
            if records and all(job is None for job in records.values()):
                raise Stalled(f"waiting for {what}: every job record is gone")
            if records and done(records):
                return records
            time.sleep(0.5)
        raise Stalled(f"timed out after {timeout_s:g} s waiting for {what}")

    def _drain(self) -> None:
        """The faults, in order, then the figures; a drain that cannot finish (records gone,
        a phase timed out) is reported as it stands."""
        try:
            self._through_the_faults()
        except Stalled as exc:
            self.report.stalled = str(exc)
            self.taps["A"].release()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.children["worker-a"].pid, signal.SIGCONT)
        self._count(self._states())

    def _through_the_faults(self) -> None:
        from services.jobs.state import State

        count = self.count
        self._push_to("worker-a")
        self._wait(
            "a fifth completed",
            lambda r: len(self._completed(r)) >= FREEZE_AT * count,
            self.phase_s,
        )

        # 2. Freeze A in the middle of an action: its delete sent, not yet arrived.
        worker_a = self.children["worker-a"]

        def freeze(name: str) -> None:
            os.killpg(worker_a.pid, signal.SIGSTOP)
            self.frozen_object = name
            self.frozen.set()

        self.taps["A"].hold_next_delete(freeze)
        if not self.frozen.wait(timeout=120):
            raise RuntimeError("worker A sent no delete to freeze on")
        frozen_at = time.monotonic()
        self._push_to("worker-b")  # new deliveries go to the instance that answers
        a_reads = {name for name, _ in self.taps["A"].log.reads}
        a_deleted = {d.name for d in self.taps["A"].log.deletes if d.status < 500}
        held_by_a = sorted((a_reads - a_deleted) | {self.frozen_object})

        # 3. SIGKILL the emulators mid-drain (A still frozen), right after they acknowledged
        #    a terminal write (its answer never reaches the worker); restart on the same
        #    directory and ports.
        records = self._wait(
            "two fifths completed",
            lambda r: len(self._completed(r)) >= KILL_AT * count,
            self.phase_s,
        )
        completed_before = len(self._completed(records))
        crashed = threading.Event()
        acknowledged_before: list[TerminalWrite] = []

        def crash() -> None:
            # The worker's next calls wait (a network stall) until the acknowledged writes
            # were read back, so none of its retries can re-apply what the crash lost.
            self.faults.hold()
            acknowledged_before.extend(self.faults.log.acknowledged)
            assert self.emulators is not None
            os.killpg(self.emulators.pid, signal.SIGKILL)
            self.emulators.wait(timeout=30)
            if self.emulators.stdout is not None:
                self.emulators.stdout.close()
            crashed.set()

        self.faults.crash_after_next(crash)
        if not crashed.wait(timeout=CRASH_WAIT_S):
            # No terminal write came (code that marks none): a plain SIGKILL mid-drain.
            self.faults.crash_after_next(None)
            crash()
        killed_at = time.monotonic()
        self._start_emulators()
        down_s = time.monotonic() - killed_at
        after = self._wait("the restarted emulators", lambda r: True, 60)
        crashed_on = self.faults.log.crashed_on
        if crashed_on is not None:
            survived = after.get(crashed_on.job_id)
            if survived is None or survived.ended_lease_token != crashed_on.token:
                self.report.missing_after_restart.append(f"{crashed_on.job_id} (crashed on)")
        self.report.missing_after_restart += sorted(
            w.job_id
            for w in acknowledged_before
            if w.state in (State.COMPLETED.value, State.FAILED.value)
            and (after.get(w.job_id) is None or after[w.job_id].state.value != w.state)
        )
        self.faults.resume()
        self.report.kill = {
            "at completed": completed_before,
            "right after the emulator acknowledged": (
                f"{crashed_on.state} of {crashed_on.job_id}" if crashed_on else "nothing"
            ),
            "terminal writes acknowledged to the worker before it": len(acknowledged_before),
            "down for s": round(down_s, 1),
        }

        # 4. B takes A's jobs over; their objects come back (re-uploaded); A resumes late.
        frozen_jobs = sorted({name.removeprefix("src/") for name in held_by_a})
        self._wait(
            "B completing the jobs A held",
            lambda r: (
                all(r.get(j) is not None and r[j].state.terminal for j in frozen_jobs)
                and time.monotonic() - frozen_at >= FREEZE_AT_LEAST_S
            ),
            # Write faults cost the jobs A held retry cycles, each RETRY_LATER_DELAY_S later.
            3 * self.phase_s if self.write_faults else self.phase_s,
        )
        records = self._states()
        completed = sorted(self._completed(records))
        others = [j for j in completed if j not in frozen_jobs][:REUPLOADS]
        for job_id in [*frozen_jobs, *others]:
            if records.get(job_id) is not None and records[job_id].state is State.COMPLETED:
                self._reupload(f"src/{job_id}")
        # The held delete reaches the bucket now, then A wakes to its answer.
        resumed_at = time.monotonic()
        self.taps["A"].release()
        os.killpg(worker_a.pid, signal.SIGCONT)
        frozen_s = time.monotonic() - frozen_at
        self.report.freeze = {
            "frozen for s": round(frozen_s, 1),
            "lease s": LEASE_S,
            "its delete held": self.frozen_object,
            "jobs A held (read, not deleted)": len(frozen_jobs),
            "objects re-uploaded": len(self.reuploaded),
        }

        # 5. Finish the drain: every job terminal, both instances idle for a while.
        self._wait(
            "every job terminal",
            lambda r: all(job is not None and job.state.terminal for job in r.values()),
            max(DRAIN_TIMEOUT_S, 2 * self.phase_s),
        )
        quiet_until = time.monotonic() + 2 * LEASE_S
        while time.monotonic() < quiet_until or any(t.log.in_flight for t in self.taps.values()):
            time.sleep(0.5)
        late = [d for d in self.taps["A"].log.deletes if d.at >= resumed_at]
        self.report.freeze["A's deletes arriving after SIGCONT (status)"] = dict(
            Counter(d.status for d in late)
        )

    def _push_to(self, name: str) -> None:
        tap = self.answer_taps.get(name)
        config = rig.push_config(tap.url if tap is not None else self.urls[name])
        config["oidc_token"]["service_account_email"] = self.topology.pusher_email
        config["oidc_token"]["audience"] = self.urls["worker-a"]
        self.subscriber.modify_push_config(
            request={"subscription": self.topology.push_subscription, "push_config": config}
        )

    def _reupload(self, name: str) -> None:
        blob = self.bucket.blob(name)
        blob.upload_from_string(b"restored")
        self.reuploaded[name] = str(blob.generation)

    # -- the figures ----------------------------------------------------------------------

    def _count(self, records: dict[str, Any]) -> None:
        from services.jobs.state import State

        report = self.report
        for job_id, job in records.items():
            report.states[job.state.value if job else "gone"] += 1
            if job is None:  # lost, and an acknowledged schedule missing
                report.missing_schedules.append(job_id)
                report.lost.append(f"{job_id}:gone")
            elif job.state is State.COMPLETED:
                continue
            elif (
                job.state is State.FAILED
                and job.last_error
                and _permanent(job.last_error.code)
                and job.params.get("bucket") == OTHER_BUCKET
            ):
                report.legit_failed.append(job_id)
            else:
                report.lost.append(f"{job_id}:{job.state.value}")
        present = {b.name: str(b.generation) for b in self.gcs.list_blobs(BUCKET)}
        deletes = [d for tap in self.taps.values() for d in tap.log.deletes]
        succeeded = Counter(d.name for d in deletes if 200 <= d.status < 300)
        report.deleted_twice = sorted(n for n, k in succeeded.items() if k > 1)
        report.unfenced_deletes = sorted(
            d.name for d in deletes if 200 <= d.status < 300 and not d.if_generation_match
        )
        report.refused_412 = sum(1 for d in deletes if d.status == 412)
        report.reuploads_removed = sorted(
            n for n, g in self.reuploaded.items() if present.get(n) != g
        )
        deleted_by_job = {d.name for d in deletes if 200 <= d.status < 300}
        for name, generation in self.uploaded.items():
            if name in self.reuploaded or present.get(name) == generation:
                continue
            job = records.get(name.removeprefix("src/"))
            ran = job is not None and job.state is State.COMPLETED
            if name not in deleted_by_job and not ran:
                report.missing_uploads.append(name)
        acknowledged = self.faults.log.acknowledged
        report.acknowledged_terminal = len(acknowledged)
        for write in acknowledged:
            job = records.get(write.job_id)
            if write.state in (State.COMPLETED.value, State.FAILED.value) and (
                job is None or job.state.value != write.state
            ):
                report.missing_terminal.append(write.job_id)
        report.faults = Counter(self.faults.log.injected)
        report.faults_by_state = Counter(self.faults.log.by_state)
        report.storage_unreachable = sum(t.log.unreachable for t in self.taps.values())
        report.storage_injected = self.outages.answered
        for name in ("worker-a", "worker-b"):
            report.outcomes[name] = _outcomes(self.children[name].log_text())
        report.write_faults = Counter(self.faults.log.write_faults)
        report.answers = {name: Counter(tap.answers) for name, tap in self.answer_taps.items()}


def _permanent(code: str) -> bool:
    """A failure the action itself decided (bad params, forbidden): not a fault's doing."""
    return code == "permanent"


def _outcomes(log: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            outcome = entry.get("outcome")
            if isinstance(outcome, str):
                found[outcome] += 1
    return found
