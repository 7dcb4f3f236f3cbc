"""One `jobsctl` invocation: its clients, clock, operator identity and output streams, and the
one place where failures become exit codes."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TextIO

from google.api_core import exceptions as gexc

from services.cli.backends import Backends
from services.cli.errors import CliError, ExitCode, UsageError
from services.cli.output import Progress, Report, write
from services.cli.timespec import TimeSpecError
from services.edge.settings import (
    DEFAULT_FIRESTORE_TIMEOUT_S,
    DEFAULT_TERMINAL_RETENTION_S,
    FIRESTORE_TIMEOUT_S,
    MAX_FIRESTORE_TIMEOUT_S,
    MAX_TERMINAL_RETENTION_S,
    MIN_FIRESTORE_TIMEOUT_S,
    MIN_TERMINAL_RETENTION_S,
    SHARDS,
    TERMINAL_RETENTION_S,
    EnvReader,
    SettingsError,
)
from services.jobs import errors as jobs_errors
from services.jobs.catalogue import Catalogue, load_catalogue
from services.jobs.clock import Clock, SystemClock
from services.jobs.plan import PlanError
from services.jobs.shard import MAX_SHARDS
from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

Handler = Callable[["Session", argparse.Namespace], Report]

# Google API errors that mean "the backend is not there for you right now".
_UNAVAILABLE = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.RetryError,
    gexc.PermissionDenied,
    gexc.Unauthenticated,
    gexc.InternalServerError,
)


@dataclass
class Session:
    """What a command handler may use; handlers never read the environment themselves."""

    project_flag: str | None
    environ: Mapping[str, str]
    operator: str
    stdout: TextIO
    stderr: TextIO
    as_json: bool = False
    database_flag: str | None = None
    clock: Clock = field(default_factory=SystemClock)
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    # The action catalogue: built-ins and installed plug-ins (`main` loads it before parsing).
    catalogue: Catalogue = field(default_factory=load_catalogue)
    backends: Backends = field(init=False)
    _store: FirestoreJobStore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.backends = Backends(self.project_flag, self.environ, self.database_flag)

    def now(self) -> datetime:
        return self.clock.now()

    def store(self) -> FirestoreJobStore:
        """The jobs store over the configured Firestore."""
        if self._store is None:
            retention, timeout_s = store_bounds(self.environ)
            self._store = FirestoreJobStore(
                self.backends.firestore(),
                clock=self.clock,
                terminal_retention=retention,
                timeout_s=timeout_s,
                shards=store_shards(self.environ),
                database=self.backends.database,
                known_actions=self.catalogue,
            )
        return self._store

    def progress(self, label: str, total: int | None = None) -> Progress:
        return Progress(self.stderr, label, total)

    def env(self, key: str, default: str = "") -> str:
        return self.environ.get(key, "").strip() or default


def store_bounds(environ: Mapping[str, str]) -> tuple[timedelta, float]:
    """The services' terminal retention and per-call Firestore timeout, read from the same
    variables with the same bounds (JOBS_TERMINAL_RETENTION_S, JOBS_FIRESTORE_TIMEOUT_S), so a
    job cancelled by an operator expires exactly like one the services finish."""
    env = EnvReader(environ)
    retention_s = env.duration_s(
        TERMINAL_RETENTION_S,
        DEFAULT_TERMINAL_RETENTION_S,
        min=MIN_TERMINAL_RETENTION_S,
        max=MAX_TERMINAL_RETENTION_S,
    )
    timeout_s = env.duration_s(
        FIRESTORE_TIMEOUT_S,
        DEFAULT_FIRESTORE_TIMEOUT_S,
        min=MIN_FIRESTORE_TIMEOUT_S,
        max=MAX_FIRESTORE_TIMEOUT_S,
    )
    try:
        env.finish()
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return timedelta(seconds=retention_s), timeout_s


def store_shards(environ: Mapping[str, str]) -> int:
    """JOBS_SHARDS, read as the services read it: with N > 1 the deployment has only sharded
    timestamp indexes, so jobsctl's queries must be the per-shard ones too, and a job it
    schedules gets the shard the scan looks for."""
    env = EnvReader(environ)
    shards = env.int(SHARDS, default=1, min=1, max=MAX_SHARDS)
    try:
        env.finish()
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return shards


def run_command(session: Session, args: argparse.Namespace) -> int:
    """Run the handler chosen by `args`; print its report or the error; return the exit code."""
    handler: Handler = args.handler
    try:
        report = handler(session, args)
    except CliError as exc:
        return _fail(session, exc.exit_code, str(exc))
    except (jobs_errors.ValidationError, PlanError, TimeSpecError) as exc:
        return _fail(session, ExitCode.USAGE, str(exc))
    except jobs_errors.StoreUnavailable as exc:
        return _fail(session, ExitCode.UNAVAILABLE, str(exc))
    except jobs_errors.JobsError as exc:
        return _fail(session, ExitCode.REFUSED, str(exc))
    except _UNAVAILABLE as exc:
        return _fail(session, ExitCode.UNAVAILABLE, f"backend unavailable: {exc}")
    except gexc.NotFound as exc:
        return _fail(session, ExitCode.REFUSED, f"not found: {exc.message}")
    except gexc.GoogleAPICallError as exc:
        return _fail(session, ExitCode.UNAVAILABLE, f"backend error: {exc}")
    finally:
        session.backends.close()
    write(report, session.stdout, as_json=session.as_json)
    return report.exit_code


def _fail(session: Session, code: ExitCode, message: str) -> int:
    if session.as_json:
        write_error(session.stderr, message, code)
    else:
        session.stderr.write(f"jobsctl: {message}\n")
    return int(code)


def write_error(stderr: TextIO, message: str, code: ExitCode) -> None:
    """An error as one JSON line on stderr: stdout carries only results."""
    stderr.write(json.dumps({"error": message, "exit_code": int(code)}) + "\n")
