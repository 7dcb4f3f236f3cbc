"""The scan's exceptions: why a run could not complete, with what it did before it stopped."""

from __future__ import annotations

from services.store.runs import ScanRun


class ScanError(Exception):
    """The scan run could not complete."""

    def __init__(self, message: str | None = None, run: ScanRun | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        self.run = run  # what the run did before it stopped, when known


class StoreUnreachable(ScanError):
    """Firestore could not be reached; the run stopped. Records it claimed stay claimed."""


class StoreRefused(ScanError):
    """Firestore refused the run's requests for a reason retrying cannot fix (permissions, a
    missing index or database, an invalid request): a configuration error, not an outage."""


class QueueUnreachable(ScanError):
    """Pub/Sub could not be reached: every publish of the run failed and was recorded."""
