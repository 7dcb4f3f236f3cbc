"""The functions-framework entry point of the console (`--target=console`).

    python -m services.console.main         # the start-up check: exit 2 naming every bad key
    python -m services.edge.server --target=console --source=services/console/main.py

The image runs both, in that order (Dockerfile), as for the API (services/api/main.py): a bad
JOBS_* value, or a stand-in identity on Cloud Run, stops the revision at its startup probe.
Nothing happens at import but registering the JSON error handler with functions-framework.
The first request reads ConsoleSettings, configures JSON logging and builds the app; every
later request of the instance reuses it.
"""

from __future__ import annotations

import os

import flask
import functions_framework

from services.console.app import ConsoleHandler, create_app, handler_of
from services.console.settings import ConsoleSettings
from services.edge import startup
from services.telemetry.log import configure_logging

SERVICE = "console"

startup.install_json_errors(functions_framework.errorhandler)


def console(request: flask.Request) -> flask.Response:
    """The operator console: every path of the service."""
    return startup.answer(SERVICE, _shared_handler, request)


def check() -> int:
    """The start-up check of the console's settings (see the module docstring)."""
    return startup.check_settings(SERVICE, ConsoleSettings.from_env, os.environ) or (
        startup.check_catalogue(SERVICE)
    )


def _build() -> ConsoleHandler:
    settings = ConsoleSettings.from_env(os.environ)
    configure_logging(settings.log_level)
    return handler_of(create_app(settings))


_shared_handler = startup.SharedHandler(_build)


if __name__ == "__main__":
    raise SystemExit(check())
