"""`jobsctl` failures and the exit code each one ends with.

Exit codes (documented in `jobsctl --help` and docs/runbook.md):
0 done; 1 refused (job not found, terminal, lost a race, conflict); 2 usage or validation;
3 backend unavailable (Firestore or Pub/Sub unreachable, no credentials); 4 the project looks
uninitialised (`stats`: no control document and no job: the wrong --project, or a deployment
whose scan never ran).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    REFUSED = 1
    USAGE = 2
    UNAVAILABLE = 3
    UNINITIALISED = 4


class CliError(Exception):
    """jobsctl could not do that."""

    exit_code = ExitCode.REFUSED

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class Refused(CliError):
    """The operation was refused; nothing was changed."""


class UsageError(CliError):
    """The command line is invalid."""

    exit_code = ExitCode.USAGE


class BackendUnavailable(CliError):
    """A backend (Firestore or Pub/Sub) is unavailable; retry later."""

    exit_code = ExitCode.UNAVAILABLE
