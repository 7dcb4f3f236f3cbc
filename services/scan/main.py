"""The functions-framework entry point of the scan service (`--target=scan`).

    python -m services.scan.main        # the start-up check: exit 2 naming every bad key or plug-in
    python -m services.edge.server --target=scan --source=services/scan/main.py

The image runs both, in that order (Dockerfile), so a bad JOBS_* value stops the revision at
its startup probe (services/edge/startup.py). Nothing happens at import but registering the
JSON error handler with functions-framework. The first request reads ScanSettings, configures
JSON logging and builds the app (clients, verifier, publisher); every later request of the
instance reuses it. The publisher is flushed and closed when the process exits.
"""

from __future__ import annotations

import atexit
import os

import flask
import functions_framework

from services.edge import startup
from services.edge.publisher import Publisher
from services.scan.app import ScanHandler, create_app, handler_of
from services.scan.settings import ScanSettings
from services.telemetry.log import configure_logging

SERVICE = "scan"

startup.install_json_errors(functions_framework.errorhandler)


def scan(request: flask.Request) -> flask.Response:
    """The HTTP function Cloud Scheduler triggers."""
    return startup.answer(SERVICE, _shared_handler, request)


def check() -> int:
    """The start-up check of the scan's settings and action catalogue (see the module
    docstring): the scan claims by each action's budget, so a plug-in that cannot be loaded
    stops its start too, not its first run."""
    return startup.check_settings(SERVICE, ScanSettings.from_env, os.environ) or (
        startup.check_catalogue(SERVICE)
    )


def _build() -> ScanHandler:
    settings = ScanSettings.from_env()
    configure_logging(settings.log_level)
    publisher = Publisher.create(
        settings.project, settings.topic, timeout_s=settings.publish_timeout_s
    )
    atexit.register(publisher.close)
    return handler_of(create_app(settings, publisher=publisher))


_shared_handler = startup.SharedHandler(_build)


if __name__ == "__main__":
    raise SystemExit(check())
