"""The functions-framework entry point of the worker (`--target=worker`).

    python -m services.worker.main      # the start-up check: exit 2 naming every bad key or plug-in
    python -m services.edge.server --target=worker --source=services/worker/main.py

The image runs both, in that order (Dockerfile), so a bad JOBS_* value stops the revision at
its startup probe (services/edge/startup.py). Nothing happens at import but registering the
JSON error handler with functions-framework. The app (clients, settings, verifier) is built on
the first request and then shared by every request of the instance.
"""

from __future__ import annotations

import os

import flask
import functions_framework

from services.edge import startup
from services.telemetry.log import configure_logging
from services.worker.app import PushHandler, create_app, handler_of
from services.worker.settings import WorkerSettings

SERVICE = "worker"

startup.install_json_errors(functions_framework.errorhandler)


def worker(request: flask.Request) -> flask.Response:
    """The Pub/Sub push endpoint."""
    return startup.answer(SERVICE, _shared_handler, request)


def check() -> int:
    """The start-up check of the worker's settings (see the module docstring)."""
    return startup.check_settings(SERVICE, WorkerSettings.from_env, os.environ) or (
        startup.check_catalogue(SERVICE)
    )


def _build() -> PushHandler:
    settings = WorkerSettings.from_env(os.environ)
    configure_logging(settings.log_level)
    return handler_of(create_app(settings))


_shared_handler = startup.SharedHandler(_build)


if __name__ == "__main__":
    raise SystemExit(check())
