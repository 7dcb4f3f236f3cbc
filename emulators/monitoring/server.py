"""Start and stop one Monitoring emulator: the gRPC MetricService and its sampler thread."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from types import TracebackType

from emulators import grpc_server
from emulators.monitoring.samples import SAMPLE_PERIOD_S, VISIBILITY_DELAY_S, AgeSource, Samples
from emulators.monitoring.service import generic_handler

logger = logging.getLogger(__name__)

_GRPC_WORKERS = 8
_MAX_GRPC_MESSAGE_BYTES = 4 * 1024 * 1024
# Real seconds between the sampler's checks of its clock (a sample is taken once per period).
_TICK_S = 1.0


class MonitoringEmulator:
    """A running emulator. Build it with `start()`; stop it with `.stop()` or a `with` block."""

    def __init__(self, host: str, port: int, samples: Samples, autosample: bool) -> None:
        self.host = host
        self.samples = samples
        self._grpc = grpc_server.new_server(
            _GRPC_WORKERS, "monitoring-grpc", _MAX_GRPC_MESSAGE_BYTES
        )
        self._grpc.add_generic_rpc_handlers((generic_handler(samples),))
        host_part = f"[{host}]" if ":" in host else host
        self.port = grpc_server.bind(self._grpc, f"{host_part}:{port}")
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        if autosample:
            self._sampler = threading.Thread(
                target=self._run_sampler, name="monitoring-sampler", daemon=True
            )

    @property
    def address(self) -> str:
        """`host:port` of the gRPC endpoint (the scan's JOBS_MONITORING_EMULATOR_HOST)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def _start(self) -> None:
        self._grpc.start()
        if self._sampler is not None:
            self._sampler.start()
        logger.info("monitoring emulator on %s", self.address)

    def _run_sampler(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.tick()
            except Exception as exc:  # the source (the Pub/Sub emulator) away: try again
                logger.warning("monitoring emulator: sampling failed: %s", exc)
            self._stop.wait(_TICK_S)

    def stop(self, grace_s: float = 0.5) -> None:
        self._stop.set()
        self._grpc.stop(grace_s).wait()
        if self._sampler is not None and self._sampler.is_alive():
            self._sampler.join(timeout=5)

    def __enter__(self) -> MonitoringEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def start(
    source: AgeSource,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    clock: Callable[[], float] = time.time,
    period_s: float = SAMPLE_PERIOD_S,
    visibility_delay_s: float = VISIBILITY_DELAY_S,
    autosample: bool = True,
) -> MonitoringEmulator:
    """Start an emulator in this process sampling `source` (subscription path -> the publish
    time of its oldest unacked message, e.g. `PubsubEmulator.oldest_unacked_publish_times`);
    port 0 picks a free port. `autosample=False` leaves sampling to the caller
    (`emulator.samples.sample()`), for tests that move a fake clock."""
    samples = Samples(source, clock, period_s=period_s, visibility_delay_s=visibility_delay_s)
    emulator = MonitoringEmulator(host, port, samples, autosample)
    emulator._start()
    return emulator


def pubsub_admin_source(admin_url: str, timeout_s: float = 5.0) -> AgeSource:
    """The ages of a Pub/Sub emulator in another process, from its admin endpoint."""
    from emulators.pubsub.admin import OLDEST_UNACKED_PATH

    def read() -> Mapping[str, float | None]:
        with urllib.request.urlopen(
            admin_url.rstrip("/") + OLDEST_UNACKED_PATH, timeout=timeout_s
        ) as r:
            body = json.loads(r.read())
        return dict(body["subscriptions"])

    return read
