"""The functions-framework entry point of the scan service.

    functions-framework --target=scan --source=services/scan/main.py

Nothing happens at import. The first request reads ScanSettings from the environment,
configures JSON logging and builds the app; later requests reuse it.
"""

from __future__ import annotations

import atexit
import sys
import threading
from pathlib import Path

import flask

# functions-framework loads this file by path, not as part of the package; make the project
# root importable so `services.*` resolves the same way in both cases.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from services.scan.app import ScanHandler  # noqa: E402

_lock = threading.Lock()
_handler: ScanHandler | None = None


def scan(request: flask.Request) -> flask.Response:
    """The HTTP function Cloud Scheduler triggers."""
    return _get_handler().handle(request)


def _get_handler() -> ScanHandler:
    global _handler
    with _lock:
        if _handler is None:
            _handler = _build()
        return _handler


def _build() -> ScanHandler:
    from services.jobs.log import configure_logging
    from services.jobs.publisher import Publisher
    from services.jobs.settings import SettingsError
    from services.scan.app import create_app, handler_of
    from services.scan.settings import ScanSettings

    try:
        settings = ScanSettings.from_env()
    except SettingsError:
        configure_logging("INFO")
        raise
    configure_logging(settings.log_level)
    publisher = Publisher.create(
        settings.project, settings.topic, timeout_s=settings.publish_timeout_s
    )
    atexit.register(publisher.close)
    return handler_of(create_app(settings, publisher=publisher))
