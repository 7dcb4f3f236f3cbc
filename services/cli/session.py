"""One `jobsctl` invocation: its clients, clock, operator identity and output streams, and the
one place where failures become exit codes."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

from google.api_core import exceptions as gexc

from services.cli.backends import Backends
from services.cli.errors import CliError, ExitCode
from services.cli.output import Progress, Report, write
from services.cli.planner import PlanError
from services.cli.timespec import TimeSpecError
from services.jobs import errors as jobs_errors
from services.jobs.clock import Clock, SystemClock
from services.jobs.store import FirestoreJobStore

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
    backends: Backends = field(init=False)
    _store: FirestoreJobStore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.backends = Backends(self.project_flag, self.environ, self.database_flag)

    def now(self) -> datetime:
        return self.clock.now()

    def store(self) -> FirestoreJobStore:
        """The jobs store over the configured Firestore."""
        if self._store is None:
            self._store = FirestoreJobStore(self.backends.firestore(), clock=self.clock)
        return self._store

    def progress(self, label: str, total: int | None = None) -> Progress:
        return Progress(self.stderr, label, total)

    def env(self, key: str, default: str = "") -> str:
        return self.environ.get(key, "").strip() or default


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
    session.stderr.write(f"jobsctl: {message}\n")
    if session.as_json:
        # Scripts reading stdout get the failure in the same format as a success.
        report = Report(data={"error": message, "exit_code": int(code)}, text="")
        write(report, session.stdout, as_json=True)
    return int(code)
