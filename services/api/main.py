"""The functions-framework entry point of the API (`--target=api`).

    functions-framework --target=api --source=services/api/main.py

Nothing happens at import. The first request reads ApiSettings from the environment,
configures JSON logging and builds the app; every later request of the instance reuses it.
"""

from __future__ import annotations

import os
import threading

import flask

from services.api.app import ApiHandler, create_app, handler_of
from services.api.settings import ApiSettings
from services.jobs.log import configure_logging

_lock = threading.Lock()
_handler: ApiHandler | None = None


def api(request: flask.Request) -> flask.Response:
    """The schedule API: every path of the service."""
    return _shared_handler().handle(request)


def _shared_handler() -> ApiHandler:
    global _handler
    with _lock:
        if _handler is None:
            settings = ApiSettings.from_env(os.environ)
            configure_logging(settings.log_level)
            _handler = handler_of(create_app(settings))
        return _handler
