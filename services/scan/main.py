"""The functions-framework entry point of the scan service (`--target=scan`).

    functions-framework --target=scan --source=services/scan/main.py

Nothing happens at import. The first request reads ScanSettings from the environment,
configures JSON logging and builds the app (clients, verifier, publisher); every later request
of the instance reuses it. The publisher is flushed and closed when the process exits.
"""

from __future__ import annotations

import atexit
import threading

import flask

from services.jobs.log import configure_logging
from services.jobs.publisher import Publisher
from services.scan.app import ScanHandler, create_app, handler_of
from services.scan.settings import ScanSettings

_lock = threading.Lock()
_handler: ScanHandler | None = None


def scan(request: flask.Request) -> flask.Response:
    """The HTTP function Cloud Scheduler triggers."""
    return _shared_handler().handle(request)


def _shared_handler() -> ScanHandler:
    global _handler
    with _lock:
        if _handler is None:
            _handler = _build()
        return _handler


def _build() -> ScanHandler:
    # A SettingsError propagates: functions-framework answers 500 and logs every bad key.
    settings = ScanSettings.from_env()
    configure_logging(settings.log_level)
    publisher = Publisher.create(
        settings.project, settings.topic, timeout_s=settings.publish_timeout_s
    )
    atexit.register(publisher.close)
    return handler_of(create_app(settings, publisher=publisher))
