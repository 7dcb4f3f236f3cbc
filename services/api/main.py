"""The functions-framework entry point of the API (`--target=api`).

    python -m services.api.main         # the start-up check: exit 2 naming every bad key or plug-in
    python -m services.edge.server --target=api --source=services/api/main.py

The image runs both, in that order (Dockerfile), so a bad JOBS_* value stops the revision at
its startup probe (services/edge/startup.py). Nothing happens at import but registering the
JSON error handler with functions-framework. The first request reads ApiSettings from the
environment, configures JSON logging and builds the app; every later request of the instance
reuses it.
"""

from __future__ import annotations

import os

import flask
import functions_framework

from services.api.app import ApiHandler, create_app, handler_of
from services.api.settings import ApiSettings
from services.edge import startup
from services.telemetry.log import configure_logging

SERVICE = "api"

startup.install_json_errors(functions_framework.errorhandler)


def api(request: flask.Request) -> flask.Response:
    """The schedule API: every path of the service."""
    return startup.answer(SERVICE, _shared_handler, request)


def check() -> int:
    """The start-up check of the API's settings (see the module docstring)."""
    return startup.check_settings(SERVICE, ApiSettings.from_env, os.environ) or (
        startup.check_catalogue(SERVICE)
    )


def _build() -> ApiHandler:
    settings = ApiSettings.from_env(os.environ)
    configure_logging(settings.log_level)
    return handler_of(create_app(settings))


_shared_handler = startup.SharedHandler(_build)


if __name__ == "__main__":
    raise SystemExit(check())
