"""The clients `jobsctl` talks to, built on first use from flags and the environment.

Firestore and Pub/Sub clients honour FIRESTORE_EMULATOR_HOST / PUBSUB_EMULATOR_HOST, so the
same commands run against the local stack and production. Against an emulator, a one-second
TCP probe comes first: the client libraries would otherwise retry an absent emulator for a
minute before failing.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.cli.errors import BackendUnavailable, UsageError
from services.edge.settings import HTTP_TARGETS, PROJECT

# The CLI's own variables (the ones the services also read are their settings' constants).
OPERATOR = "JOBS_OPERATOR"  # who the operator is in audit trails
FIRESTORE_DATABASE = "JOBS_FIRESTORE_DATABASE"  # a named Firestore database
DEAD_LETTER_SUBSCRIPTION = "JOBS_DEAD_LETTER_SUBSCRIPTION"  # dead-letter pull subscription
# The variables jobsctl reads itself (docs/configuration.md lists them beside the services'):
# its own three, and the HTTP targets an `http.request` job it schedules must name (the api's
# and the worker's key, read through `Deployment.from_env`).
OWN_KEYS = (OPERATOR, FIRESTORE_DATABASE, DEAD_LETTER_SUBSCRIPTION, HTTP_TARGETS)

FIRESTORE_EMULATOR_HOST = "FIRESTORE_EMULATOR_HOST"
PUBSUB_EMULATOR_HOST = "PUBSUB_EMULATOR_HOST"
_PROBE_TIMEOUT_S = 1.0


def resolve_project(flag: str | None, environ: Mapping[str, str]) -> str:
    """--project, else JOBS_PROJECT, else GOOGLE_CLOUD_PROJECT; a usage error when none is set."""
    for value in (flag, environ.get(PROJECT), environ.get("GOOGLE_CLOUD_PROJECT")):
        if value and value.strip():
            return value.strip()
    raise UsageError(f"no project: pass --project or set {PROJECT}")


def probe_emulator(variable: str, environ: Mapping[str, str], what: str) -> None:
    """If `variable` names an emulator, make sure something listens there (BackendUnavailable)."""
    address = environ.get(variable, "").strip()
    if not address:
        return
    host, _, port_text = address.rpartition(":")
    try:
        port = int(port_text)
    except ValueError as exc:
        raise UsageError(f"{variable}={address!r} is not HOST:PORT") from exc
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", port), _PROBE_TIMEOUT_S):
            return
    except OSError as exc:
        raise BackendUnavailable(
            f"{what} emulator at {address} ({variable}) is not reachable: {exc.strerror or exc}; "
            "start the local stack (make run) or unset the variable to use Google Cloud"
        ) from exc


@dataclass
class Backends:
    """Lazily built clients for one CLI invocation."""

    project_flag: str | None
    environ: Mapping[str, str]
    database_flag: str | None = None
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def project(self) -> str:
        return resolve_project(self.project_flag, self.environ)

    @property
    def database(self) -> str | None:
        """The named Firestore database, or None for the default one."""
        return self.database_flag or self.environ.get(FIRESTORE_DATABASE) or None

    def firestore(self) -> Any:
        if "firestore" not in self._cache:
            project = self.project
            probe_emulator(FIRESTORE_EMULATOR_HOST, self.environ, "Firestore")
            from google.cloud import firestore

            with _credentials_errors("Firestore"):
                self._cache["firestore"] = firestore.Client(project=project, database=self.database)
        return self._cache["firestore"]

    def publisher(self) -> Any:
        if "publisher" not in self._cache:
            probe_emulator(PUBSUB_EMULATOR_HOST, self.environ, "Pub/Sub")
            import google.cloud.pubsub_v1 as pubsub_v1

            with _credentials_errors("Pub/Sub"):
                self._cache["publisher"] = pubsub_v1.PublisherClient()
        return self._cache["publisher"]

    def subscriber(self) -> Any:
        if "subscriber" not in self._cache:
            probe_emulator(PUBSUB_EMULATOR_HOST, self.environ, "Pub/Sub")
            import google.cloud.pubsub_v1 as pubsub_v1

            with _credentials_errors("Pub/Sub"):
                self._cache["subscriber"] = pubsub_v1.SubscriberClient()
        return self._cache["subscriber"]

    def close(self) -> None:
        """Close every client built (each owns a gRPC channel)."""
        publisher = self._cache.pop("publisher", None)
        if publisher is not None:
            with contextlib.suppress(Exception):
                publisher.stop()
            with contextlib.suppress(Exception):
                publisher.api.transport.close()
        for name in ("subscriber", "firestore"):
            client = self._cache.pop(name, None)
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()


@contextlib.contextmanager
def _credentials_errors(what: str) -> Any:
    from google.auth import exceptions as auth_exceptions

    try:
        yield
    except auth_exceptions.DefaultCredentialsError as exc:
        raise BackendUnavailable(
            f"no Google credentials for {what}: {exc}; run `gcloud auth application-default "
            "login` or set the emulator host variable"
        ) from exc
