"""Start and stop one Pub/Sub emulator: gRPC services, push delivery and the admin endpoint."""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc

from emulators import grpc_server
from emulators.journal import Journal, open_journal
from emulators.pubsub import limits
from emulators.pubsub.admin import AdminServer
from emulators.pubsub.broker import Broker
from emulators.pubsub.exceptions import PortInUse
from emulators.pubsub.faults import FaultPlan
from emulators.pubsub.publisher import PublisherService
from emulators.pubsub.pusher import Pusher
from emulators.pubsub.rpc import generic_handler
from emulators.pubsub.subscriber import SubscriberService

if TYPE_CHECKING:
    from emulators.oidc.issuer import Issuer

logger = logging.getLogger(__name__)

SNAPSHOT_KIND = "pubsub"

# Above production's 10 MB request limit, so an oversize publish reaches us and we answer
# INVALID_ARGUMENT as production does, instead of gRPC's RESOURCE_EXHAUSTED.
_MAX_GRPC_MESSAGE_BYTES = 32 * 1024 * 1024
# Each StreamingPull holds a worker for its lifetime; leave plenty for unary calls.
_GRPC_WORKERS = 128


class PubsubEmulator:
    """A running emulator. Build it with `start()`; stop it with `.stop()` or a `with` block."""

    def __init__(
        self,
        host: str,
        port: int,
        admin_port: int,
        issuer: Issuer | None,
        max_push_concurrency: int,
        pull_wait_s: float,
        data_file: Path | None = None,
    ) -> None:
        if issuer is None:
            from emulators.oidc.issuer import Issuer

            issuer = Issuer()
        self.host = host
        self.issuer = issuer
        self._faults = FaultPlan()
        self._broker = Broker()
        self.data_file = data_file
        if data_file is not None:
            try:
                self._broker.journal = _load(self._broker, data_file)
            except BaseException:
                self._broker.close()
                raise
        self._pusher = Pusher(self._broker, issuer, max_per_subscription=max_push_concurrency)
        self._grpc = grpc_server.new_server(_GRPC_WORKERS, "pubsub-grpc", _MAX_GRPC_MESSAGE_BYTES)
        for service in (
            PublisherService(self._broker),
            SubscriberService(self._broker, pull_wait_s),
        ):
            self._grpc.add_generic_rpc_handlers(
                (generic_handler(service.service_name, service.methods(), self._faults),)
            )
        self._admin: AdminServer | None = None
        try:
            self.port = self._bind_grpc(host, port)
            self._admin = self._bind_admin(host, admin_port)
        except PortInUse:
            self._grpc.stop(0)
            self._broker.close()
            if self._broker.journal is not None:
                self._broker.journal.close(None)
            raise
        self.admin_port = self._admin.port

    @staticmethod
    def _format_host(host: str) -> str:
        return f"[{host}]" if ":" in host else host

    def _bind_grpc(self, host: str, port: int) -> int:
        try:
            return grpc_server.bind(self._grpc, f"{self._format_host(host)}:{port}")
        except OSError as exc:
            raise PortInUse(f"cannot listen for gRPC on {host}:{port}: {exc}") from exc

    def _bind_admin(self, host: str, port: int) -> AdminServer:
        try:
            return AdminServer(host, port, self)
        except OSError as exc:
            raise PortInUse(f"cannot listen for admin HTTP on {host}:{port}: {exc}") from exc

    def _start(self) -> None:
        self._grpc.start()
        assert self._admin is not None
        self._admin.start()
        self._pusher.start()
        logger.info("pubsub emulator on %s, admin on %s", self.address, self.admin_url)

    @property
    def address(self) -> str:
        """`host:port` of the gRPC endpoint: the value for PUBSUB_EMULATOR_HOST."""
        return f"{self._format_host(self.host)}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self._format_host(self.host)}:{self.admin_port}"

    @property
    def certs_url(self) -> str:
        """Where the issuer's certificates are served, for `id_token.verify_token`."""
        return f"{self.admin_url}/oauth2/v1/certs"

    # -- test and admin controls ----------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return self._broker.stats_snapshot()

    def clear_stats(self) -> None:
        self._broker.clear_stats()

    def oldest_unacked_publish_times(self) -> dict[str, float | None]:
        """Subscription path -> its oldest unacked message's publish time (epoch seconds),
        None when it holds none: the local Monitoring emulator's source for the
        oldest-unacked-age metric."""
        return self._broker.oldest_unacked_publish_times()

    def reset(self) -> None:
        """Forget all topics, subscriptions, messages, counters and faults."""
        self._faults.clear()
        self._broker.reset()

    def inject_fault(
        self,
        method: str = "Publish",
        status: str | grpc.StatusCode | None = None,
        count: int = 1,
        delay_s: float = 0.0,
    ) -> None:
        """Make the next `count` calls of `method` wait `delay_s` and/or fail with `status`."""
        self._faults.add(method, status=status, delay_s=delay_s, count=count)

    def clear_faults(self) -> None:
        self._faults.clear()

    def faults(self) -> list[dict[str, object]]:
        return self._faults.describe()

    def certs(self) -> dict[str, str]:
        return self.issuer.certs()

    # -- lifecycle ------------------------------------------------------------------------

    def stop(self, grace_s: float = 0.5) -> None:
        self._broker.close()
        self._grpc.stop(grace_s).wait()
        if self._admin is not None:
            self._admin.stop()
        self._pusher.stop()
        if self._broker.journal is not None:
            # After the last ack: one snapshot with everything, an empty log.
            self._broker.journal.close(self._broker.export_state())

    def save(self) -> None:
        """Fold the log into a new ``data_file`` snapshot now (when there is one).

        Not needed for durability: every acknowledged change is in the log already."""
        self._broker.checkpoint()

    def __enter__(self) -> PubsubEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def start(
    host: str = "127.0.0.1",
    port: int = 0,
    admin_port: int = 0,
    issuer: Issuer | None = None,
    max_push_concurrency: int = limits.DEFAULT_PUSH_CONCURRENCY,
    pull_wait_s: float = 1.0,
    data_file: Path | None = None,
) -> PubsubEmulator:
    """Start an emulator in this process; port 0 picks a free port. Raises PortInUse.

    With ``data_file`` (``DIR/pubsub.json``) the state saved there and the changes logged
    since (``DIR/pubsub.log``) are loaded first (SnapshotError, naming the file, when either is
    unreadable), and from then on every change is on disk before it is answered and every
    message before it is handed out (emulators/journal.py); :meth:`PubsubEmulator.stop` folds
    the log into the snapshot.
    """
    emulator = PubsubEmulator(
        host, port, admin_port, issuer, max_push_concurrency, pull_wait_s, data_file
    )
    emulator._start()
    return emulator


def _load(broker: Broker, data_file: Path) -> Journal:
    """Load the snapshot, replay the log on top, and start logging (errors name the file)."""
    return open_journal(broker, "pubsub", data_file, SNAPSHOT_KIND, "messages", "pubsub emulator")
