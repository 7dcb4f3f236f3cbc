"""Start every local stand-in together (or Google's official emulators) and stop them together.

The built-in set runs in this process: Firestore (gRPC), Pub/Sub (gRPC, with OIDC-signed push),
the OIDC issuer, Cloud Storage and the Monitoring read API (sampling Pub/Sub's oldest
unacked ages), all sharing one signing key so tokens the Pub/Sub emulator
attaches verify against the certs URL the services are given. `--official` runs Google's
Firestore and Pub/Sub emulators through `gcloud` as child processes instead (each in its own
process group, so stopping one also stops the JVM gcloud spawns); the issuer and Cloud Storage
stay built-in because Google ships no emulator for them, and no Monitoring emulator runs (it
samples the built-in Pub/Sub's state), so the local scan's stale-enqueued rescue then measures
from enqueued_at alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from emulators.oidc.issuer import Issuer
from emulators.pubsub.limits import DEFAULT_PUSH_CONCURRENCY
from emulators.snapshot import SnapshotError

if TYPE_CHECKING:
    from emulators.pubsub.server import PubsubEmulator

logger = logging.getLogger(__name__)

DEFAULT_PROJECT = "deferred-jobs-local"
DEFAULT_HOST = "127.0.0.1"
READY_LINE = "# emulators ready"

# How long a gcloud child gets to open its port: the JVM-based emulators start slowly.
DEFAULT_START_TIMEOUT_S = 90.0
_STOP_GRACE_S = 10.0
# The longest a clean stop of the built-in emulators waits, the sum of each component's own
# bounded waits (a thread join of at most 5 s per HTTP server or background thread, gRPC's
# 0.5 s grace and the 5 s wait after it): oidc 5; storage 5; firestore 10.5 (admin server,
# gRPC); pubsub 15.5 (timer thread, admin server, push thread, gRPC's grace); monitoring 5.5
# (gRPC's grace, sampler thread). Each wait ends early when its thread does; under load they
# may all run to their bound, so whoever signals the launcher waits this long (plus the
# snapshot writes of a --data-dir) before calling it hung.
STOP_BOUND_S = 5 + 5 + 10.5 + 15.5 + 5.5

GCLOUD_INSTALL_HINT = (
    "--official needs the gcloud CLI on PATH with the emulator components: install the Google "
    "Cloud SDK (https://cloud.google.com/sdk/docs/install), then run `gcloud components install "
    "beta cloud-firestore-emulator pubsub-emulator` (they also need Java 11+). Without "
    "--official the built-in emulators need nothing extra."
)


# The composite indexes and single-field exemptions the project declares (the Pulumi program
# creates the same ones): the local stack and the integration tests enforce them, so an
# unindexed query cannot land.
PROJECT_INDEXES = "services.jobs.schema"


class LaunchError(Exception):
    """The emulators could not be started."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class PortInUse(LaunchError):
    """A port an emulator needs is already in use."""


class GcloudMissing(LaunchError):
    """gcloud is not on PATH."""


class ComponentFailed(LaunchError):
    """An emulator failed to start."""


@dataclass(frozen=True)
class Ports:
    """Where each component listens; 0 picks a free port (tests)."""

    firestore: int = 8080
    firestore_admin: int = 8081
    pubsub: int = 8085
    pubsub_admin: int = 8086
    oidc: int = 8090
    storage: int = 9023
    # The Monitoring read API for Pub/Sub's oldest-unacked age (built-in set only).
    monitoring: int = 8087

    def named(self) -> list[tuple[str, int]]:
        return [(f.name.replace("_", " "), getattr(self, f.name)) for f in fields(self)]


@dataclass
class Stack:
    """What is running: how to stop each part, and the environment a shell needs."""

    exports: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _stops: list[tuple[str, Callable[[], None]]] = field(default_factory=list)

    def started(self, name: str, stop: Callable[[], None]) -> None:
        self._stops.append((name, stop))

    def stop(self) -> None:
        """Stop every part, newest first; one failing to stop does not keep the rest running."""
        while self._stops:
            name, stop = self._stops.pop()
            try:
                stop()
            except Exception:
                logger.exception("stopping %s failed", name)
            else:
                logger.info("stopped %s", name)

    def export_lines(self) -> list[str]:
        lines = [f"export {key}={value}" for key, value in self.exports.items()]
        return lines + [f"# {note}" for note in self.notes]


def check_ports_free(host: str, ports: Ports) -> None:
    """Fail before starting anything when a fixed port is taken, naming its component."""
    seen: dict[int, str] = {}
    for name, port in ports.named():
        if port == 0:
            continue
        if port in seen:
            raise PortInUse(f"{name} and {seen[port]} are both given port {port}")
        seen[port] = name
        if not port_is_free(host, port):
            raise PortInUse(
                f"{name}: port {port} on {host} is already in use "
                f"(stop whatever holds it, or pass --{name.replace(' ', '-')}-port)"
            )


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Like the servers themselves: a port left in TIME_WAIT is reusable, a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def start_builtin(
    host: str,
    ports: Ports,
    project: str,
    *,
    firestore_indexes: str | None = None,
    data_dir: Path | None = None,
    push_concurrency: int = DEFAULT_PUSH_CONCURRENCY,
) -> Stack:
    """Start the five built-in emulators in this process; on any failure stop what started.

    ``push_concurrency``: push requests Pub/Sub keeps in flight per subscription (production
    has no fixed cap: it adapts to the endpoint's successes,
    https://cloud.google.com/pubsub/docs/push; behind Cloud Run the cap is instances x
    concurrency).

    ``firestore_indexes`` (a firestore.indexes.json, a module or module:NAME) makes Firestore
    strict.
    ``data_dir``: Firestore, Pub/Sub and Cloud Storage load their state from there, and every
    write they acknowledge is on disk there before the answer (a SIGKILL loses none); a stop
    folds each log into its snapshot.
    """
    check_ports_free(host, ports)
    stack = Stack()
    try:
        issuer = Issuer()
        _start_oidc(stack, host, ports.oidc, issuer)
        _start_storage(stack, host, ports.storage, data_dir and data_dir / "storage")
        _start_firestore(stack, host, ports, firestore_indexes, data_dir)
        pubsub = _start_pubsub(stack, host, ports, issuer, data_dir, push_concurrency)
        _start_monitoring(stack, host, ports.monitoring, pubsub)
    except BaseException:
        stack.stop()
        raise
    if data_dir is not None:
        stack.notes.append(f"data: {data_dir} (every acknowledged write is on disk)")
    _export_project(stack, project)
    return stack


def start_official(
    host: str,
    ports: Ports,
    project: str,
    *,
    gcloud: str | None = None,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> Stack:
    """Google's Firestore and Pub/Sub emulators via gcloud; the issuer and Storage built-in."""
    gcloud = gcloud or shutil.which("gcloud")
    if gcloud is None:
        raise GcloudMissing(GCLOUD_INSTALL_HINT)
    check_ports_free(host, ports)
    firestore_port = ports.firestore or free_port(host)
    pubsub_port = ports.pubsub or free_port(host)
    stack = Stack()
    try:
        issuer = Issuer()
        _start_oidc(stack, host, ports.oidc, issuer)
        _start_storage(stack, host, ports.storage, None)
        for component, port in (("firestore", firestore_port), ("pubsub", pubsub_port)):
            command = official_command(gcloud, component, host, port, project)
            _start_child(stack, component, command, host, port, start_timeout_s)
            stack.exports[OFFICIAL_ENV[component]] = f"{host}:{port}"
    except BaseException:
        stack.stop()
        raise
    stack.notes.append(
        "official Pub/Sub emulator: push requests carry NO OIDC token, so the worker's Cloud Run "
        "front end answers them 403 (the worker alone, 401); use the built-in emulators to "
        "exercise push authentication"
    )
    _export_project(stack, project)
    return stack


# The variable each official emulator's clients read to find it.
OFFICIAL_ENV = {"firestore": "FIRESTORE_EMULATOR_HOST", "pubsub": "PUBSUB_EMULATOR_HOST"}


def official_command(gcloud: str, component: str, host: str, port: int, project: str) -> list[str]:
    """The gcloud command line that starts Google's emulator of `component` on host:port."""
    if component == "firestore":
        return [gcloud, "emulators", "firestore", "start", f"--host-port={host}:{port}"]
    if component == "pubsub":
        return [
            gcloud,
            "beta",
            "emulators",
            "pubsub",
            "start",
            f"--project={project}",
            f"--host-port={host}:{port}",
        ]
    raise ValueError(f"Google ships no emulator named {component!r}")


def start_official_component(
    component: str,
    host: str,
    project: str,
    *,
    gcloud: str | None = None,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> Stack:
    """One of Google's emulators ("firestore" or "pubsub") alone on a free port: the stack that
    stops it, its address in ``exports`` under the variable its clients read (the test
    fixtures' `JOBS_TEST_EMULATORS=google` mode starts each one only when a test needs it)."""
    gcloud = gcloud or shutil.which("gcloud")
    if gcloud is None:
        raise GcloudMissing(GCLOUD_INSTALL_HINT)
    port = free_port(host)
    stack = Stack()
    try:
        command = official_command(gcloud, component, host, port, project)
        _start_child(stack, component, command, host, port, start_timeout_s)
    except BaseException:
        stack.stop()
        raise
    stack.exports[OFFICIAL_ENV[component]] = f"{host}:{port}"
    return stack


# Where free ports are picked: below the kernel's ephemeral range. A port the kernel hands out
# for port 0 comes from that range, and so does the local port of every outgoing connection, so
# between our probe and the server's own bind any process's next connection could take it (seen:
# a worker of `make run` that could not listen while parallel tests ran). Below the range only
# another explicit bind can, which this machine's launchers make only after probing.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PICK = 10_000
_PICK_TRIES = 64


def free_port(host: str) -> int:
    """A port on `host` that is free now and that no outgoing connection will take meanwhile."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    ceiling = _ephemeral_floor()
    picker = random.SystemRandom()  # not the global `random`: tests seed and draw from it
    for _ in range(_PICK_TRIES if ceiling > _LOWEST_PICK else 0):
        port = picker.randrange(_LOWEST_PICK, ceiling)
        with socket.socket(family) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _ephemeral_floor() -> int:
    """The lowest port of the kernel's ephemeral range (0 where it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _export_project(stack: Stack, project: str) -> None:
    stack.exports["GOOGLE_CLOUD_PROJECT"] = project
    stack.exports["JOBS_PROJECT"] = project


def _start_oidc(stack: Stack, host: str, port: int, issuer: Issuer) -> None:
    from emulators.oidc.server import start

    with _naming("oidc", host, port):
        server = start(host, port, issuer=issuer)
    stack.started("oidc", server.stop)
    stack.exports["JOBS_OIDC_CERTS_URL"] = server.certs_url
    stack.notes.append(f"oidc tokens: POST {server.token_url} with JSON audience, email")
    # The Cloud Run front end runs per service, before its process (docs/emulators.md).
    stack.notes.append(
        "cloud run front end: python -m emulators.cloudrun --service NAME "
        f"--certs-url {server.certs_url} --invoker EMAIL -- COMMAND"
    )


def _start_storage(stack: Stack, host: str, port: int, data_dir: Path | None) -> None:
    from emulators.storage.server import ENV_VAR, start

    with _naming("storage", host, port):
        emulator = start(host, port, data_dir=data_dir)
    stack.started("storage", emulator.stop)
    stack.exports[ENV_VAR] = emulator.url


def _start_firestore(
    stack: Stack, host: str, ports: Ports, index_spec: str | None, data_dir: Path | None
) -> None:
    from emulators.firestore import indexes
    from emulators.firestore.server import start

    try:
        declared = indexes.load(index_spec) if index_spec else None
    except indexes.IndexDefinitionError as exc:
        raise LaunchError(f"firestore indexes: {exc}") from exc
    with _naming("firestore", host, ports.firestore):
        emulator = start(
            host=host,
            port=ports.firestore,
            admin_port=ports.firestore_admin,
            indexes=declared,
            data_file=data_dir and data_dir / "firestore.json",
        )
    stack.started("firestore", emulator.stop)
    stack.exports["FIRESTORE_EMULATOR_HOST"] = emulator.address
    stack.notes.append(f"firestore admin: http://{host}:{emulator.admin_port}")
    if index_spec:
        stack.notes.append(f"firestore strict: indexes from {index_spec}")


def _start_pubsub(
    stack: Stack,
    host: str,
    ports: Ports,
    issuer: Issuer,
    data_dir: Path | None,
    push_concurrency: int = DEFAULT_PUSH_CONCURRENCY,
) -> PubsubEmulator:
    from emulators.pubsub.server import start

    with _naming("pubsub", host, ports.pubsub):
        emulator = start(
            host=host,
            port=ports.pubsub,
            admin_port=ports.pubsub_admin,
            issuer=issuer,
            max_push_concurrency=push_concurrency,
            data_file=data_dir and data_dir / "pubsub.json",
        )
    stack.started("pubsub", emulator.stop)
    stack.exports["PUBSUB_EMULATOR_HOST"] = emulator.address
    stack.notes.append(f"pubsub admin: http://{host}:{emulator.admin_port}")
    return emulator


# Where the scan finds the Monitoring emulator (services/scan/settings.py reads the same name).
MONITORING_ENV = "JOBS_MONITORING_EMULATOR_HOST"


def _start_monitoring(stack: Stack, host: str, port: int, pubsub: PubsubEmulator) -> None:
    """The Monitoring read API, sampling this Pub/Sub emulator's oldest unacked ages."""
    from emulators.monitoring.server import start

    with _naming("monitoring", host, port):
        emulator = start(pubsub.oldest_unacked_publish_times, host=host, port=port)
    stack.started("monitoring", emulator.stop)
    stack.exports[MONITORING_ENV] = emulator.address


@contextlib.contextmanager
def _naming(component: str, host: str, port: int) -> Iterator[None]:
    """Re-raise a component's start failure as a LaunchError that names it and its port."""
    try:
        yield
    except LaunchError:
        raise
    except SnapshotError as exc:
        # Its message already names the component, the file and the fix.
        raise LaunchError(str(exc)) from exc
    except Exception as exc:
        where = f"{host}:{port}" if port else host
        if _means_port_in_use(exc):
            raise PortInUse(f"{component}: cannot listen on {where}: {exc}") from exc
        raise ComponentFailed(f"{component}: failed to start on {where}: {exc}") from exc


def _means_port_in_use(exc: Exception) -> bool:
    return type(exc).__name__ == "PortInUse" or (
        isinstance(exc, OSError) and exc.errno in {98, 48}  # EADDRINUSE on Linux, macOS
    )


def _start_child(
    stack: Stack,
    name: str,
    command: list[str],
    host: str,
    port: int,
    timeout_s: float,
) -> None:
    logger.info("starting %s: %s", name, " ".join(command))
    try:
        # A new session: the child and the JVM it spawns form one group we can signal.
        child = subprocess.Popen(command, start_new_session=True)
    except OSError as exc:
        raise ComponentFailed(f"{name}: cannot run {command[0]}: {exc}") from exc
    stack.started(name, lambda: stop_process_group(child))
    deadline = time.monotonic() + timeout_s
    while not _accepts_connections(host, port):
        if child.poll() is not None:
            raise ComponentFailed(f"{name}: `{' '.join(command)}` exited with {child.returncode}")
        if time.monotonic() >= deadline:
            raise ComponentFailed(f"{name}: nothing listening on {host}:{port} after {timeout_s} s")
        time.sleep(0.2)


def _accepts_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def stop_process_group(child: subprocess.Popen[bytes], grace_s: float = _STOP_GRACE_S) -> None:
    """SIGTERM the child's process group, then SIGKILL it if it has not exited in time."""
    if child.poll() is not None:
        _signal_group(child.pid, signal.SIGKILL)  # reap any grandchild it left behind
        return
    _signal_group(child.pid, signal.SIGTERM)
    try:
        child.wait(grace_s)
    except subprocess.TimeoutExpired:
        logger.warning("pid %s ignored SIGTERM; killing its group", child.pid)
    _signal_group(child.pid, signal.SIGKILL)
    child.wait()


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
