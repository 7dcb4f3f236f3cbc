"""Starting and stopping the emulator: the gRPC server plus its admin HTTP server."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from emulators import grpc_server
from emulators.firestore.admin import AdminServer
from emulators.firestore.billing import Billing
from emulators.firestore.engine import Engine
from emulators.firestore.errors import EmulatorError, InvalidArgument
from emulators.firestore.faults import FaultPlan
from emulators.firestore.indexes import CompositeIndex, Definitions, IndexSet
from emulators.firestore.service import FirestoreService
from emulators.journal import Journal, open_journal

logger = logging.getLogger(__name__)

SNAPSHOT_KIND = "firestore"
_MAX_MESSAGE = 64 * 1024 * 1024
_WORKERS = 128


class PortInUse(EmulatorError):
    """The requested port is already in use."""


class Emulator:
    """A running emulator. Use as a context manager or call :meth:`stop`."""

    def __init__(
        self,
        host: str,
        port: int,
        admin_port: int,
        engine: Engine,
        billing: Billing,
        faults: FaultPlan,
        grpc_server: grpc.Server,
        admin: AdminServer | None,
        indexes: IndexSet | None = None,
        data_file: Path | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.admin_port = admin_port
        self.engine = engine
        self.billing = billing
        self.faults = faults
        self._grpc_server = grpc_server
        self._admin = admin
        self.indexes = indexes
        self.data_file = data_file

    def save(self) -> None:
        """Fold the log into a new ``data_file`` snapshot now (when there is one).

        Not needed for durability: every acknowledged change is in the log already."""
        self.engine.checkpoint()

    @property
    def strict(self) -> bool:
        """Whether compound queries need a composite index, as in production."""
        return self.indexes is not None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    # -- admin operations (also served over HTTP) ------------------------------------------

    def reset(self, project: str | None = None, database: str | None = None) -> None:
        """Delete every document of a project's database (or of everything), and the
        indexes added to that project at run time."""
        self.engine.reset(project, database)
        if self.indexes is not None and database is None:
            self.indexes.drop(project)
            if project is not None:
                self.engine.refresh_exemptions(project)

    def add_index(self, project: str, index: CompositeIndex, database: str = "(default)") -> None:
        """Create a composite index in one database (strict mode), as CreateIndex would."""
        if self.indexes is None:
            raise InvalidArgument("The emulator is not strict: every query is served already.")
        self.indexes.add((project, database), index)

    def use_indexes(self, project: str, definitions: Definitions) -> None:
        """Serve one project from other index definitions (strict mode), as a deployment
        with another configuration would have; a reset of the project forgets them."""
        if self.indexes is None:
            raise InvalidArgument("The emulator is not strict: every query is served already.")
        self.indexes.use(project, definitions)
        self.engine.refresh_exemptions(project)

    def stats(self, project: str | None = None) -> dict[str, Any]:
        return self.billing.snapshot(project)

    def reset_stats(self, project: str | None = None) -> None:
        self.billing.reset(project)

    def inject_fault(
        self,
        method: str,
        status: str | grpc.StatusCode | None = None,
        count: int = 1,
        delay_s: float = 0.0,
        message: str | None = None,
    ) -> None:
        """Make the next ``count`` calls of ``method`` fail with ``status`` and/or wait."""
        self.faults.inject(method, status, count, delay_s, message)

    def clear_faults(self) -> None:
        self.faults.clear()

    def stop(self, grace: float | None = 0.5) -> None:
        if self._admin is not None:
            self._admin.stop()
            self._admin = None
        self._grpc_server.stop(grace).wait(5)
        if self.engine.journal is not None:
            # After the last request: one snapshot with everything, an empty log.
            self.engine.journal.close(self.engine.export_state())

    def __enter__(self) -> Emulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start(
    host: str = "127.0.0.1",
    port: int = 0,
    admin_port: int | None = 0,
    *,
    transaction_timeout_s: float = 270.0,
    transaction_idle_timeout_s: float = 60.0,
    lock_timeout_s: float = 20.0,
    max_workers: int = _WORKERS,
    indexes: Iterable[CompositeIndex] | None = None,
    read_abort_rate: float = 0.0,
    seed: int | None = None,
    data_file: Path | None = None,
) -> Emulator:
    """Start the gRPC server (and the admin HTTP server unless ``admin_port`` is None).

    Port 0 picks a free port. Raises :class:`PortInUse` when a port is taken. With
    ``indexes`` (possibly empty) the emulator is strict: a compound query no composite index
    serves fails with FAILED_PRECONDITION, as in production. ``read_abort_rate`` makes that
    share of reads inside read-write transactions answer ABORTED (``seed`` fixes the draw).
    With ``data_file`` (``DIR/firestore.json``) the documents saved there and the changes
    logged since (``DIR/firestore.log``) are loaded first (SnapshotError, naming the file,
    when either is unreadable), and from then on every change is logged and on disk before it
    is answered (emulators/journal.py); :meth:`Emulator.stop` folds the log into the snapshot.
    """
    engine = Engine(
        transaction_timeout_s, transaction_idle_timeout_s, lock_timeout_s, read_abort_rate, seed
    )
    faults = FaultPlan()
    index_set = IndexSet(indexes) if indexes is not None else None
    if index_set is not None:
        # No single-field entries for exempted fields, as production keeps none.
        engine.exemptions = index_set.exemptions
    billing = Billing(index_set)  # write rates count what this index set holds
    if data_file is not None:
        engine.journal = _load(engine, data_file)
    service = FirestoreService(engine, billing, faults, index_set)
    server = grpc_server.new_server(max_workers, "firestore-rpc", _MAX_MESSAGE)
    server.add_generic_rpc_handlers((service.generic_handler(),))
    try:
        bound = grpc_server.bind(server, f"{host}:{port}")
    except OSError as exc:
        if engine.journal is not None:
            engine.journal.close(None)
        raise PortInUse(f"Cannot listen on {host}:{port}: port in use.") from exc
    admin = None
    emulator = Emulator(host, bound, 0, engine, billing, faults, server, None, index_set, data_file)
    if admin_port is not None:
        try:
            admin = AdminServer(emulator, host, admin_port)
        except OSError as exc:
            server.stop(None)
            raise PortInUse(f"Cannot listen on {host}:{admin_port}: {exc}.") from exc
        emulator.admin_port = admin.port
        emulator._admin = admin
    server.start()
    if admin is not None:
        admin.start()
    logger.info("Firestore emulator on %s (admin %s)", emulator.address, emulator.admin_url)
    return emulator


def _load(engine: Engine, data_file: Path) -> Journal:
    """Load the snapshot, replay the log on top, and start logging (errors name the file)."""
    return open_journal(
        engine, "firestore", data_file, SNAPSHOT_KIND, "documents", "Firestore emulator"
    )
