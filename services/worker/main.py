"""The functions-framework entry point: `--target=worker`.

The app (clients, settings, verifier) is built on the first request, not at import, and then
shared by every request of the instance.
"""

from __future__ import annotations

import os
import threading

import flask

from services.jobs.log import configure_logging
from services.worker.app import PushHandler, create_app, handler_of
from services.worker.settings import WorkerSettings

_lock = threading.Lock()
_handler: PushHandler | None = None


def worker(request: flask.Request) -> flask.Response:
    """The Pub/Sub push endpoint."""
    return _shared_handler().handle(request)


def _shared_handler() -> PushHandler:
    global _handler
    with _lock:
        if _handler is None:
            settings = WorkerSettings.from_env(os.environ)
            configure_logging(settings.log_level)
            _handler = handler_of(create_app(settings))
        return _handler
