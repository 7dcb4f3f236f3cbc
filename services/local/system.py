"""The local system end to end: emulators, the scan, worker and api processes (each behind the
local Cloud Run front end unless --direct), the console (with a stand-in identity for IAP),
topology, demo, and the local Cloud Scheduler (emulators/scheduler) that triggers the scan at
the default stack's cadence.

`LocalSystem.run()` brings everything up in dependency order, seeds the demo, then reports one
line per scan run until the demo's due jobs are done (and, unless told to exit then, until
Ctrl-C). Whatever happens, every child process is stopped before it returns.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from emulators.cloudrun import image as container_image
from emulators.launcher import (
    DEFAULT_PROJECT,
    MONITORING_ENV,
    PROJECT_INDEXES,
    READY_LINE,
    free_port,
    port_is_free,
)
from emulators.launcher import Ports as EmulatorPorts
from emulators.oidc.server import CERTS_PATH, TOKEN_PATH
from emulators.scheduler.attempt import token_from_issuer_url
from emulators.scheduler.job import HttpJob
from emulators.scheduler.retry import RetryConfig
from emulators.scheduler.scheduler import Attempt, CloudScheduler
from services.api import settings as api_keys
from services.cli.backends import DEAD_LETTER_SUBSCRIPTION, Backends
from services.console import settings as console_keys
from services.edge import scan_deployment
from services.edge import settings as common_keys
from services.edge.resource_names import Names
from services.edge.scheduler_cron import CronSchedule
from services.jobs.catalogue import Catalogue, load_catalogue
from services.jobs.clock import SystemClock
from services.jobs.deployment import Deployment
from services.jobs.http_targets import HttpTarget, targets_json
from services.local.cloud_run import deployments, front_end_argv
from services.local.demo import Demo, DemoStatus, demo_status, plan_demo, seed_demo
from services.local.interrupts import InterruptGate
from services.local.lock import StackLock
from services.local.stack import Child, PortInUse, StackError, Supervisor, port_accepts
from services.local.topology import PushPolicy, Topology, create_topology
from services.scan import cadence
from services.scan import settings as scan_keys
from services.store.job_store import FirestoreJobStore
from services.worker import settings as worker_keys

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
_EMULATOR_START_S = {False: 60.0, True: 180.0}  # built-in, official (JVMs start slowly)
_SERVICE_START_S = 60.0
# A container image starts slower than a process (podman, then the interpreter in it): one
# took 17-21 s to listen on a two-core machine at load average 17-30 (docs/image.md).
_IMAGE_START_S = 180.0
# How long the stop waits for a front end and its container: Cloud Run's 10 s grace after
# SIGTERM (the front end's own), plus podman's removal of the container.
_IMAGE_STOP_S = 20.0
_POLL_S = 0.5
# The local producer the api accepts (in the cloud: the stack's apiCallers), and the variables
# examples/node reads to reach the api and mint its tokens from the local issuer.
API_CALLER_ACCOUNT = "deferred-jobs-producer"
# Who the console takes every local visitor for (in the cloud: the user IAP signs in; locally
# a stand-in, labelled on every page).
STAND_IN_OPERATOR = "operator@local.test"
PRODUCER_API_URL = "DEFERRED_JOBS_API_URL"
PRODUCER_TOKEN_URL = "DEFERRED_JOBS_TOKEN_URL"
PRODUCER_CALLER = "DEFERRED_JOBS_CALLER"
# The local scheduler job's location: the region both committed stacks deploy to
# (Pulumi.dev.yaml, Pulumi.prod.yaml). Only its job name shows it.
SCHEDULER_LOCATION = "europe-west1"


class DemoTimeout(StackError):
    """The demo's due jobs did not complete in time."""


@dataclass(frozen=True)
class Ports(EmulatorPorts):
    """Where each part listens on 127.0.0.1 (the emulators' ports, then the services'); 0 picks
    a free port."""

    scan: int = 8100
    worker: int = 8101
    api: int = 8102
    console: int = 8103

    @classmethod
    def all_free(cls) -> Ports:
        return cls(**{f.name: 0 for f in fields(cls)})

    def named(self) -> list[tuple[str, int]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


@dataclass(frozen=True)
class Options:
    ports: Ports = field(default_factory=Ports)
    project: str = DEFAULT_PROJECT
    # TEST SETTING: trigger the scan every this many seconds instead of on the stack's cron
    # schedule (Cloud Scheduler cannot go below a minute). None: the default stack's schedule.
    test_cadence_s: float | None = None
    official: bool = False
    exit_when_done: bool = False
    timeout_s: float | None = None
    log_dir: Path = ROOT / ".local"
    demo: bool = True
    # False: the services listen on their ports themselves, with no Cloud Run front end.
    cloud_run: bool = True
    # False: the front ends run as with Cloud Run's invoker_iam_disabled (no invoker check).
    invoker_iam: bool = True
    fresh: bool = False  # start the emulators empty and keep nothing
    shards: int = 1  # JOBS_SHARDS everywhere, and the emulator's index set of that N
    # A container image: the front ends run the services from it with podman (docs/image.md)
    # instead of as processes of this checkout. Needs the front ends (cloud_run).
    image: str | None = None
    # The services http.request jobs may call (--http-target, JOBS_HTTP_TARGETS): the scan
    # (each rated target's claim lane), the worker, the api and the env file get them.
    http_targets: Mapping[str, HttpTarget] = field(default_factory=dict)

    @property
    def http_targets_environment(self) -> dict[str, str]:
        """JOBS_HTTP_TARGETS for a process that schedules or runs http.request jobs."""
        if not self.http_targets:
            return {}
        return {common_keys.HTTP_TARGETS: targets_json(self.http_targets)}

    @property
    def behind_cloud_run_iam(self) -> bool:
        return self.cloud_run and self.invoker_iam

    @property
    def data_dir(self) -> Path | None:
        """Where the emulators keep their state between runs (None: nothing is kept)."""
        return None if self.fresh or self.official else self.log_dir / "data"

    @property
    def firestore_indexes(self) -> str:
        """The index set the emulator enforces: the one infra deploys for this N."""
        if self.shards == 1:
            return PROJECT_INDEXES
        return f"{PROJECT_INDEXES}?shards={self.shards}"

    @property
    def scan_run_environment(self) -> dict[str, str]:
        """How each scan run works: a default stack's paced runs on its schedule
        (services/scan/cadence.py, as infra deploys them); under a test cadence, one-pass runs
        with the scan's own defaults (a paced run must fit in its interval, and a test cadence
        of seconds leaves it none)."""
        if self.test_cadence_s is not None:
            return {scan_keys.SCAN_MODE: "one-pass"}
        return {
            scan_keys.SCAN_MODE: cadence.DEFAULT_SCAN_MODE,
            scan_deployment.SCAN_TIME_BUDGET_S: str(cadence.DEFAULT_RUN_TIME_BUDGET_S),
            scan_deployment.SCAN_MAX_PER_RUN: str(cadence.DEFAULT_RUN_MAX_PER_RUN),
            scan_deployment.SCAN_POLL_S: str(cadence.DEFAULT_RUN_POLL_S),
            scan_keys.SCAN_END_WHEN_IDLE: str(cadence.DEFAULT_RUN_END_WHEN_IDLE).lower(),
            scan_keys.SCAN_ATTEMPT_DEADLINE_S: str(cadence.DEFAULT_ATTEMPT_DEADLINE_S),
        }

    @property
    def budget_interval_s(self) -> float:
        """The interval the scan budgets for (JOBS_SCAN_INTERVAL_S): the schedule's longest gap,
        as infra sets it; under a test cadence that cadence, but not below what the scan accepts
        (a faster local scheduler just finds each run's budget sooner)."""
        if self.test_cadence_s is not None:
            return max(self.test_cadence_s, scan_deployment.MIN_INTERVAL_S)
        return float(CronSchedule.parse(cadence.DEFAULT_SCHEDULE).longest_gap_s())


@dataclass
class Endpoints:
    """What came up: emulator exports, service URLs, child PIDs."""

    exports: dict[str, str] = field(default_factory=dict)
    scan_url: str = ""
    worker_url: str = ""
    api_url: str = ""
    console_url: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def check_ports(ports: Ports) -> None:
    """Fail before starting anything when a fixed port is taken, naming its flag."""
    seen: dict[int, str] = {}
    for name, port in ports.named():
        if port == 0:
            continue
        flag = f"--{name.replace('_', '-')}-port"
        if port in seen:
            raise StackError(f"{flag} and --{seen[port]}-port are both {port}")
        seen[port] = name.replace("_", "-")
        if not port_is_free(HOST, port):
            raise PortInUse(name, port, flag)


SHARDS_MARK = "jobs-shards"  # in the data dir: the --shards its records were written with


def check_kept_shards(data_dir: Path, shards: int) -> None:
    """Refuse kept data written with another --shards (its records lack or carry other shard
    values, which the other index set cannot find); record this N for the next run."""
    mark = data_dir / SHARDS_MARK
    try:
        kept = int(mark.read_text().strip()) if mark.exists() else None
    except (OSError, ValueError):
        kept = None
    if kept is None and data_dir.is_dir() and any(data_dir.iterdir()):
        kept = 1  # data kept before the mark existed: written unsharded
    if kept is not None and kept != shards:
        raise StackError(
            f"{data_dir} holds records written with --shards {kept}; run with --shards {kept}, "
            "or --fresh to start empty (a deployment changes N with jobsctl backfill-shards, "
            "docs/capacity.md)"
        )
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        mark.write_text(f"{shards}\n")
    except OSError as exc:
        raise StackError(f"cannot write {mark}: {exc.strerror or exc}") from exc


class LocalSystem:
    """One run of the local stack, writing its progress to `out`."""

    def __init__(self, options: Options, out: TextIO) -> None:
        self.options = options
        self.out = out
        self.supervisor = Supervisor(options.log_dir)
        self.endpoints = Endpoints()
        self.topology = Topology(options.project, Names.for_prefix())
        self.demo: Demo = plan_demo()
        self.clock = SystemClock()
        self._backends: Backends | None = None
        self._store: FirestoreJobStore | None = None
        self.catalogue: Catalogue | None = None
        self._storage: Any = None
        self._demo_kept = False  # the kept data already held the demo: not seeded again
        # Stop signals wait for the client calls this (main) thread makes (interrupts.py).
        self.interrupts = InterruptGate()
        # Labels this run's containers (image mode), so none outlives it.
        self.run_id = f"{os.getpid()}-{secrets.token_hex(4)}"

    def run(self) -> int:
        """Start, show progress, stop. Returns 0, or raises StackError (children stopped);
        StackLocked when another stack runs with the same directory (nothing touched)."""
        with StackLock(self.options.log_dir):
            try:
                self.start()
                return self.watch()
            finally:
                with _signals_ignored():
                    self.stop()

    # -- start --------------------------------------------------------------------------

    def start(self) -> None:
        check_ports(self.options.ports)
        if self.options.official and shutil.which("gcloud") is None:
            from emulators.launcher import GCLOUD_INSTALL_HINT

            raise StackError(GCLOUD_INSTALL_HINT)
        if self.options.image and shutil.which(container_image.PODMAN) is None:
            raise StackError("--image needs podman and runc: apt-get install podman runc")
        try:
            self.options.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StackError(
                f"--log-dir {self.options.log_dir}: {exc.strerror or exc}; pass a directory"
            ) from exc
        self._start_emulators()
        self._start_services()
        backends = self.backends()
        with self.interrupts.shielded():
            create_topology(
                self.topology,
                self.endpoints.worker_url,
                backends.publisher(),
                backends.subscriber(),
                PushPolicy(),
                lenient=self.options.official,
            )
            self._demo_kept = self.options.demo and not self._demo_missing()
            if self.options.demo and not self._demo_kept:
                seed_demo(self.demo, self.store(), self.storage(), self.clock.now())
        self._write_env_file()
        self._banner()

    def _start_emulators(self) -> None:
        ports, options = self.options.ports, self.options
        env_file = options.log_dir / "emulators.env"
        env_file.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "emulators", "--host", HOST, "--project", options.project]
        argv += ["--env-file", str(env_file)]
        for name in (
            "firestore",
            "firestore_admin",
            "pubsub",
            "pubsub_admin",
            "oidc",
            "storage",
            "monitoring",
        ):
            argv += [f"--{name.replace('_', '-')}-port", str(getattr(ports, name))]
        if options.official:
            argv.append("--official")  # Google's emulator enforces no indexes
        else:
            argv += ["--firestore-indexes", options.firestore_indexes]
        if options.data_dir is not None:
            check_kept_shards(options.data_dir, options.shards)
            argv += ["--data-dir", str(options.data_dir)]
        child = self.supervisor.start("emulators", argv, env=_base_environment(), cwd=ROOT)
        self.supervisor.wait_until(
            child,
            lambda: env_file.exists() and READY_LINE in child.log_text(),
            timeout_s=_EMULATOR_START_S[options.official],
            what="its emulators ready",
        )
        text = env_file.read_text()
        self.endpoints.exports = _parse_exports(text)
        self.endpoints.notes = [line[1:].strip() for line in text.splitlines() if line[:1] == "#"]
        self.endpoints.pids["emulators"] = child.pid
        # This process's own clients (topology, demo, progress) talk to the same emulators.
        os.environ.update(self.endpoints.exports)

    def _start_services(self) -> None:
        # The catalogue the services will load (built-ins and this environment's plug-ins):
        # a broken or conflicting plug-in stops `make run` here, before any process starts.
        self.catalogue = load_catalogue(
            deployment=Deployment(http_targets=self.options.http_targets)
        )
        ports = self.options.ports
        scan_port = ports.scan or free_port(HOST)
        worker_port = ports.worker or free_port(HOST)
        self.endpoints.scan_url = f"http://{HOST}:{scan_port}"
        self.endpoints.worker_url = f"http://{HOST}:{worker_port}"
        common = self.common_environment()
        worker_env = {
            **common,
            worker_keys.WORKER_AUDIENCE: self.endpoints.worker_url,
            worker_keys.WORKER_ALLOWED_INVOKERS: self.topology.pusher_email,
            worker_keys.MEDIA_BUCKET: self.demo.bucket,
            **self.options.http_targets_environment,
            # http.request's ID tokens: the local issuer's, naming the worker's own account
            # (in Cloud Run: the metadata server's, for the worker's service account).
            worker_keys.WORKER_ID_TOKEN_URL: self._token_url(),
            worker_keys.WORKER_ID_TOKEN_EMAIL: self.worker_email,
        }
        started = [
            self._start_function("worker", worker_port, worker_env),
            self._start_function("scan", scan_port, self.scan_deployment(common)),
            self._start_api(common),
            self._start_console(common),
        ]
        self.wait_listening(started)

    def common_environment(self) -> dict[str, str]:
        """What every service process gets: the emulators, the project, the shards."""
        return {
            **_base_environment(),
            **self.endpoints.exports,
            common_keys.PROJECT: self.options.project,
            common_keys.SHARDS: str(self.options.shards),
            common_keys.LOG_LEVEL: "INFO",
            # Behind the front end, tokens arrive as Cloud Run forwards them: signature removed.
            common_keys.BEHIND_CLOUD_RUN_IAM: str(self.options.behind_cloud_run_iam).lower(),
            "PYTHONUNBUFFERED": "1",
        }

    def scan_deployment(self, common: Mapping[str, str]) -> dict[str, str]:
        """The scan's environment (endpoints.scan_url set): as infra sets a default stack's."""
        return {
            **common,
            scan_deployment.TOPIC: self.topology.names.topic,
            scan_keys.SCAN_AUDIENCE: self.endpoints.scan_url,
            scan_keys.SCAN_ALLOWED_INVOKERS: self.topology.scheduler_email,
            scan_deployment.SCAN_INTERVAL_S: f"{self.options.budget_interval_s:g}",
            # No Cloud Monitoring write API locally: the gauges go to the scan's log instead.
            scan_keys.METRICS: "log",
            **self.options.scan_run_environment,
            # A target with a `rate` is a claim lane of its own, as infra sets it.
            **self.options.http_targets_environment,
            # The backlog-aware stale-enqueued rescue reads the push subscription's oldest
            # unacked age from the Monitoring emulator (exported as MONITORING_ENV, which the
            # scan reads); with Google's emulators there is none, and the rescue measures from
            # enqueued_at alone.
            **(
                {scan_keys.SUBSCRIPTION: self.topology.names.push_subscription}
                if MONITORING_ENV in self.endpoints.exports
                else {}
            ),
        }

    def wait_listening(self, started: list[tuple[Child, int]]) -> None:
        for child, port in started:
            self.supervisor.wait_until(
                child,
                lambda port=port: port_accepts(port),  # type: ignore[misc]
                timeout_s=_IMAGE_START_S if self.options.image else _SERVICE_START_S,
                what=f"listening on port {port}",
            )

    def _start_api(self, common: Mapping[str, str]) -> tuple[Child, int]:
        port = self.options.ports.api or free_port(HOST)
        self.endpoints.api_url = f"http://{HOST}:{port}"
        env = {
            **common,
            api_keys.API_AUDIENCE: self.endpoints.api_url,
            api_keys.API_ALLOWED_CALLERS: self.api_caller_email,
            **self.options.http_targets_environment,
        }
        return self._start_function("api", port, env)

    def _start_console(self, common: Mapping[str, str]) -> tuple[Child, int]:
        """The console, with the stand-in identity for IAP (labelled on every page). Never
        behind the local Cloud Run front end: in the cloud IAP stands in front of it and a
        browser carries no ID token, and the front end sets K_SERVICE, which the console's
        settings refuse beside a stand-in (services/console/settings.py)."""
        port = self.options.ports.console or free_port(HOST)
        self.endpoints.console_url = f"http://{HOST}:{port}"
        env = {
            **common,
            console_keys.CONSOLE_STAND_IN_IDENTITY: STAND_IN_OPERATOR,
            **self.options.http_targets_environment,
        }
        # No front end: the unsigned-token flag means nothing here and needs K_SERVICE.
        env.pop(common_keys.BEHIND_CLOUD_RUN_IAM, None)
        argv = [
            sys.executable,
            "-m",
            "services.edge.server",
            "--target=console",
            f"--source={ROOT / 'services' / 'console' / 'main.py'}",
            f"--host={HOST}",
            f"--port={port}",
        ]
        child = self.supervisor.start("console", argv, env=env, cwd=ROOT)
        self.endpoints.pids["console"] = child.pid
        return child, port

    @property
    def api_caller_email(self) -> str:
        return self.topology.names.email(API_CALLER_ACCOUNT, self.options.project)

    @property
    def worker_email(self) -> str:
        """The worker's service account, as infra names it: the ID tokens it sends name it."""
        return self.topology.names.email(self.topology.names.worker_account, self.options.project)

    def _start_function(self, target: str, port: int, env: Mapping[str, str]) -> tuple[Child, int]:
        """The functions-framework process of `target`, on `port` or behind a front end there."""
        argv = [
            sys.executable,
            "-m",
            "services.edge.server",
            f"--target={target}",
            f"--source={ROOT / 'services' / target / 'main.py'}",
            f"--host={HOST}",
        ]
        deployment = deployments(self.topology, (self.api_caller_email,))[target]
        server = deployment.container_environment() if self.options.cloud_run else {}
        # Behind the front end the container's threads match the concurrency it admits, as
        # infra sets them (services/local/cloud_run.py).
        env = {**env, **server}
        if self.options.image:
            # The container gets what this stack sets (emulators, JOBS_*), not this shell's.
            names = [
                key
                for key in env
                if key.startswith(common_keys.PREFIX)
                or key in self.endpoints.exports
                or key == "PYTHONUNBUFFERED"
                or key in server
            ]
            argv = container_image.run_argv(self.options.image, target, names, run_id=self.run_id)
        if self.options.cloud_run:
            # The front end gives the container its PORT, as Cloud Run does.
            argv = front_end_argv(
                deployment,
                argv,
                host=HOST,
                port=port,
                certs_url=self.endpoints.exports[common_keys.OIDC_CERTS_URL],
                invoker_iam=self.options.invoker_iam,
            )
        else:
            argv.append(f"--port={port}")
        child = self.supervisor.start(target, argv, env=env, cwd=ROOT)
        self.endpoints.pids[target] = child.pid
        return child, port

    # -- watch --------------------------------------------------------------------------

    def watch(self) -> int:
        """Trigger the scan on schedule, and once at once (a forced run, as `gcloud scheduler
        jobs run` does) so the demo does not wait for the next scheduled time; a line per
        attempt; return once done (or on Ctrl-C)."""
        attempts: queue.Queue[Attempt] = queue.Queue()
        scheduler = self._scheduler(attempts.put).start()
        scheduler.run_now()
        timeout_s = self.options.timeout_s
        deadline = time.monotonic() + timeout_s if timeout_s else None
        done = not self.options.demo
        try:
            while True:
                self.supervisor.check_alive()
                with suppress(queue.Empty):
                    attempt = attempts.get(timeout=_POLL_S)
                    self._report_attempt(attempt)
                    if attempt.succeeded and self.options.exit_when_done and not self.options.demo:
                        return 0  # nothing seeded: one good scan run is all there is to wait for
                if not done:
                    done = self._demo_done(deadline)
                    if done and self.options.exit_when_done:
                        return 0
        except KeyboardInterrupt:
            self._say("stopping…")
            return 0
        finally:
            scheduler.stop()

    def scheduler_job(self) -> HttpJob:
        """The scan's trigger as infra deploys it by default (services/scan/cadence.py)."""
        name = (
            f"projects/{self.options.project}/locations/{SCHEDULER_LOCATION}"
            f"/jobs/{self.topology.names.scheduler_job}"
        )
        return HttpJob(
            name=name,
            uri=self.endpoints.scan_url,
            oidc_service_account_email=self.topology.scheduler_email,
            schedule=cadence.DEFAULT_SCHEDULE,
            time_zone=cadence.DEFAULT_TIME_ZONE,
            attempt_deadline_s=cadence.DEFAULT_ATTEMPT_DEADLINE_S,
            retry=RetryConfig(retry_count=cadence.DEFAULT_RETRY_COUNT),
            test_cadence_s=self.options.test_cadence_s,
        )

    def _scheduler(self, on_attempt: Callable[[Attempt], None]) -> CloudScheduler:
        return CloudScheduler(
            self.scheduler_job(), token_from_issuer_url(self._token_url()), on_attempt=on_attempt
        )

    def _token_url(self) -> str:
        certs_url = self.endpoints.exports[common_keys.OIDC_CERTS_URL]
        return certs_url.replace(CERTS_PATH, TOKEN_PATH)

    def _demo_done(self, deadline: float | None) -> bool:
        """Whether the demo is done (said once); DemoTimeout once `deadline` passed."""
        with self.interrupts.shielded():
            status = demo_status(self.demo, self.store(), self.storage())
        if status.done:
            self._say(_done_line(status))
            if not self.options.exit_when_done:
                self._say("still running: Ctrl-C stops every process")
            return True
        if deadline is not None and time.monotonic() > deadline:
            raise DemoTimeout(
                f"the demo's due jobs did not complete within {self.options.timeout_s:g} s; "
                f"logs in {self.options.log_dir}"
            )
        return False

    def _report_attempt(self, attempt: Attempt) -> None:
        with self.interrupts.shielded():
            counts = (
                self.store()
                .stats(self.clock.now(), timedelta(minutes=10), shard_census=False)
                .per_state
            )
        states = " ".join(f"{state.value} {n}" for state, n in counts.items())
        if attempt.succeeded:
            b = attempt.body
            run = (
                f"claimed {b.get('claimed', 0)} published {b.get('published', 0)} "
                f"failed {b.get('publish_failed', 0)} reclaimed {b.get('reclaimed', 0)}"
            )
            if b.get("paused"):
                run = "paused " + run
        else:
            run = f"FAILED {attempt.status or ''} {attempt.error[:120]}".strip()
        self._say(f"scan #{attempt.number} ({_attempt_kind(attempt)}): {run} | {states}")

    # -- stop ---------------------------------------------------------------------------

    def stop(self) -> None:
        if self._backends is not None:
            self._backends.close()
        pids = ", ".join(f"{n} {p}" for n, p in self.endpoints.pids.items())
        if self.options.image:
            self.supervisor.stop_all(grace_s=_IMAGE_STOP_S)
        else:
            self.supervisor.stop_all()
        if pids:
            self._say(f"stopped: {pids}")
        if self.options.image:
            left = container_image.remove_containers(self.run_id)
            if left:
                self._say(f"removed containers still there after the stop: {', '.join(left)}")

    # -- clients of this process (built once the emulator hosts are in os.environ) ------

    def backends(self) -> Backends:
        if self._backends is None:
            self._backends = Backends(self.options.project, os.environ)
        return self._backends

    def store(self) -> FirestoreJobStore:
        if self._store is None:
            backends = self.backends()
            self._store = FirestoreJobStore(
                backends.firestore(),
                self.clock,
                shards=self.options.shards,
                database=backends.database,
            )
        return self._store

    def storage(self) -> Any:
        if self._storage is None:
            import google.cloud.storage as storage
            from google.auth.credentials import AnonymousCredentials

            self._storage = storage.Client(
                project=self.options.project, credentials=AnonymousCredentials()
            )
        return self._storage

    # -- helpers ------------------------------------------------------------------------

    def _write_env_file(self) -> None:
        lines = [f"export {k}={shlex.quote(v)}" for k, v in self._shell_exports().items()]
        # jobsctl (and the project's Python) on PATH: `source .local/env; jobsctl stats`.
        lines.append(f'export PATH="{Path(sys.executable).parent}:$PATH"')
        (self.options.log_dir / "env").write_text("\n".join(lines) + "\n")

    def _shell_exports(self) -> dict[str, str]:
        return {
            **self.endpoints.exports,
            common_keys.PROJECT: self.options.project,
            # jobsctl's lists, stats and claims must query the shards the services write.
            common_keys.SHARDS: str(self.options.shards),
            # The client libraries' own project variable: `firestore.Client()` with no
            # project argument then writes where this stack reads.
            "GOOGLE_CLOUD_PROJECT": self.options.project,
            scan_deployment.TOPIC: self.topology.names.topic,
            DEAD_LETTER_SUBSCRIPTION: self.topology.names.dead_letter_subscription,
            scan_deployment.SCAN_INTERVAL_S: f"{self.options.budget_interval_s:g}",
            # jobsctl plan and control show the per-run cap and pacing the scan runs with.
            **self.options.scan_run_environment,
            PRODUCER_API_URL: self.endpoints.api_url,
            console_keys.CONSOLE_URL: self.endpoints.console_url,
            PRODUCER_TOKEN_URL: self._token_url(),
            PRODUCER_CALLER: self.api_caller_email,
            # jobsctl schedule checks an http.request job's target against the same targets.
            **self.options.http_targets_environment,
        }

    def _banner(self) -> None:
        e = self.endpoints
        front = "behind the local Cloud Run front end, " if self.options.cloud_run else ""
        if self.options.image:
            front += f"image {self.options.image}, "
        self._say(f"scan    {e.scan_url}  ({front}pid {e.pids['scan']})")
        self._say(f"worker  {e.worker_url}  ({front}pid {e.pids['worker']})")
        self._say(
            f"api     {e.api_url}  ({front}pid {e.pids['api']}; caller {self.api_caller_email})"
        )
        self._say(
            f"console {e.console_url}  (pid {e.pids['console']}; stand-in identity "
            f"{STAND_IN_OPERATOR}, not IAP)"
        )
        catalogue = self.catalogue
        if catalogue is not None:
            listed = ", ".join(f"{n} ({catalogue.source_of(n)})" for n in catalogue.names())
            self._say(f"actions {listed}")
        targets = self.options.http_targets
        if targets:
            listed = ", ".join(f"{n} {t.url} (audience {t.audience})" for n, t in targets.items())
            self._say(f"http targets {listed}; ID tokens name {self.worker_email}")
        self._say(f"emulators (pid {e.pids['emulators']}); logs in {self.options.log_dir}")
        self._say(self._data_line())
        for note in e.notes:
            self._say(f"emulators: {note}")
        self._say(self._scheduler_line())
        if self._demo_kept:
            self._say("demo: kept from an earlier run (not seeded again)")
        elif self.options.demo:
            self._say(
                f"demo: bucket {self.demo.bucket}; {len(self.demo.due)} jobs due now, "
                "1 due in 30 days, 1 cancelled"
            )
        self._say(f"in another shell: source {self.options.log_dir / 'env'} && jobsctl watch")

    def _scheduler_line(self) -> str:
        job = self.scheduler_job()
        if job.test_cadence_s is not None:
            when = f"every {job.test_cadence_s:g} s (TEST CADENCE, not Cloud Scheduler's)"
        else:
            when = f"{job.schedule!r} ({job.time_zone})"
        return (
            f"scheduler: job {job.job_id} POSTs {job.uri} {when} as "
            f"{job.oidc_service_account_email}, attempt deadline {job.attempt_deadline_s:g} s, "
            f"{job.retry.retry_count} retries; one forced run now"
        )

    def _demo_missing(self) -> bool:
        """False when kept data already holds the demo (a re-run shows its outcome)."""
        return self.store().get(self.demo.jobs[0].job_id) is None

    def _data_line(self) -> str:
        data_dir = self.options.data_dir
        if data_dir is not None:
            return f"data: kept in {data_dir} between runs (--fresh starts empty)"
        if self.options.official:
            return "data: not kept (--official): every run starts empty"
        return "data: --fresh: started empty; nothing is kept"

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()


def _done_line(status: DemoStatus) -> str:
    due = len(status.demo.due)
    return (
        f"demo done: {status.completed}/{due} due jobs completed, {status.deleted_objects}/{due} "
        "source files deleted; the 30-day job is still deferred, the cancelled one untouched"
    )


def _attempt_kind(attempt: Attempt) -> str:
    """forced / scheduled, the execution's schedule time, and the retry number if any."""
    kind = "forced" if attempt.forced else "scheduled"
    if attempt.schedule_time is not None:
        kind += f" {attempt.schedule_time:%H:%M:%S}"
    return kind + (f" retry {attempt.retry}" if attempt.retry else "")


def _base_environment() -> dict[str, str]:
    """This environment without JOBS_* (a developer's shell must not leak into the services)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(common_keys.PREFIX)}


def _parse_exports(text: str) -> dict[str, str]:
    exports = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            exports[key.strip()] = value.strip()
    return exports


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Cleanup must finish: a second Ctrl-C or SIGTERM must not leave children behind."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
