"""`python -m emulators` as a user runs it: a real subprocess, real clients, real signals."""

from __future__ import annotations

import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from google.cloud.storage import Client as StorageClient

from emulators import snapshot
from emulators.journal import MARKER_BYTES
from emulators.launcher import (
    READY_LINE,
    STOP_BOUND_S,
    PortInUse,
    Ports,
    check_ports_free,
    free_port,
)

REPO = Path(__file__).resolve().parents[3]
ALL_FREE = [
    f"--{name.replace(' ', '-')}-port=0" for name, _ in Ports().named()
]  # every component on a free port
START_TIMEOUT_S = 60


class Launcher:
    """A running `python -m emulators` child and the lines it printed."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, file_bytes: int | None = None
    ) -> None:
        """`file_bytes`: no file the launcher writes may grow past it (RLIMIT_FSIZE), a full
        disk without root: a write that would cross it is cut short there and the next one
        fails with EFBIG (Python ignores SIGXFSZ), as a write meets ENOSPC."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "emulators", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=None if file_bytes is None else partial(_limit_files, file_bytes),
        )
        self.notes: dict[str, str] = {}
        self.stderr: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump_stdout(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.process.stderr is not None
        with self.process.stderr:
            self.stderr.extend(self.process.stderr)

    def wait_ready(self) -> dict[str, str]:
        """The exported variables, once the ready line is printed."""
        exports: dict[str, str] = {}
        while True:
            try:
                line = self._lines.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"no {READY_LINE!r} within {START_TIMEOUT_S} s")
            if line is None:
                pytest.fail(f"launcher exited early: {self.stop_and_stderr()}")
            if line == READY_LINE:
                return exports
            if line.startswith("# ") and ": " in line:
                key, _, value = line.removeprefix("# ").partition(": ")
                self.notes[key] = value
            if line.startswith("export "):
                key, _, value = line.removeprefix("export ").partition("=")
                exports[key] = value

    def terminate(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        return self._reap()

    def stop_and_stderr(self) -> str:
        self.kill_if_running()
        return "".join(self.stderr)

    def kill_if_running(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self._reap()

    def _reap(self) -> int:
        # What the launcher's stop promises (STOP_BOUND_S: every bounded wait of every
        # component), plus as long again for the snapshots and the interpreter's exit. A fixed
        # 30 s had been under that promise: one test failed under load, passing alone.
        code = self.process.wait(timeout=2 * STOP_BOUND_S)
        for pump in self._pumps:
            pump.join(timeout=2 * STOP_BOUND_S)
        return code


def _limit_files(size: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


@pytest.fixture
def launchers() -> Iterator[list[Launcher]]:
    started: list[Launcher] = []
    yield started
    for launcher in started:
        launcher.kill_if_running()


def children_of(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state, ppid, ...
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry.name))
    return found


def pid_alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def accepts(host_port: str) -> bool:
    host, port = host_port.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def test_launcher_serves_every_emulator_then_stops_them_all_on_sigterm(
    launchers: list[Launcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = Launcher(*ALL_FREE)
    launchers.append(launcher)
    env = launcher.wait_ready()
    assert set(env) >= {
        "FIRESTORE_EMULATOR_HOST",
        "PUBSUB_EMULATOR_HOST",
        "STORAGE_EMULATOR_HOST",
        "JOBS_OIDC_CERTS_URL",
        "GOOGLE_CLOUD_PROJECT",
        "JOBS_PROJECT",
    }
    project = env["GOOGLE_CLOUD_PROJECT"]
    assert project == "deferred-jobs-local"
    for key in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "STORAGE_EMULATOR_HOST"):
        monkeypatch.setenv(key, env[key])

    certs = requests.get(env["JOBS_OIDC_CERTS_URL"], timeout=5).json()
    assert len(certs) == 1
    for admin in ("firestore admin", "pubsub admin"):
        assert requests.get(launcher.notes[admin] + "/", timeout=5).json() == {"status": "ok"}

    db = firestore.Client(project=project)
    db.collection("launcher").document("probe").set({"ok": True})
    assert db.collection("launcher").document("probe").get().to_dict() == {"ok": True}

    publisher = PublisherClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/probe")
    assert publisher.publish(topic.name, b"x").result(timeout=30)

    gcs = StorageClient(project=project, credentials=AnonymousCredentials())
    gcs.create_bucket("probe").blob("o").upload_from_string(b"x")
    assert gcs.bucket("probe").blob("o").download_as_bytes() == b"x"

    assert launcher.terminate() == 0
    assert children_of(launcher.process.pid) == []
    endpoints = [env["FIRESTORE_EMULATOR_HOST"], env["PUBSUB_EMULATOR_HOST"]]
    endpoints += [env["STORAGE_EMULATOR_HOST"].removeprefix("http://")]
    endpoints += [env["JOBS_OIDC_CERTS_URL"].split("/")[2]]
    endpoints += [
        launcher.notes[a].removeprefix("http://") for a in ("firestore admin", "pubsub admin")
    ]
    assert [e for e in endpoints if accepts(e)] == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_ends_every_emulator_and_folds_each_log_into_its_snapshot(
    tmp_path: Path, launchers: list[Launcher], monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    # What a stop promises, asserted as behaviour: the process exits 0 once every component
    # stopped (within STOP_BOUND_S of waits, see `_reap`), nothing listens any more, and each
    # acknowledged write was folded into its snapshot (each log holds only its marker).
    data = tmp_path / "data"
    launcher = Launcher("--data-dir", str(data), "--project", "p", *ALL_FREE)
    launchers.append(launcher)
    env = launcher.wait_ready()
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", env["FIRESTORE_EMULATOR_HOST"])
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", env["PUBSUB_EMULATOR_HOST"])
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", env["STORAGE_EMULATOR_HOST"])
    db = firestore.Client(project="p")
    db.collection("jobs").document("j").set({"n": 1})
    db.close()
    publisher = PublisherClient()
    topic = publisher.create_topic(name="projects/p/topics/jobs").name
    SubscriberClient().create_subscription(name="projects/p/subscriptions/jobs", topic=topic)
    publisher.publish(topic, b"x").result(timeout=30)
    gcs = StorageClient(project="p", credentials=AnonymousCredentials())
    gcs.create_bucket("media").blob("o").upload_from_string(b"x")

    assert launcher.terminate(signum) == 0
    assert "# emulators stopped" in "".join(launcher.stderr)
    assert [
        e for e in (env["FIRESTORE_EMULATOR_HOST"], env["PUBSUB_EMULATOR_HOST"]) if accepts(e)
    ] == []
    for log in ("firestore.log", "pubsub.log", "storage/storage.log"):
        assert (data / log).stat().st_size == MARKER_BYTES, log
    firestore_state = snapshot.read(data / "firestore.json", "firestore")
    assert firestore_state is not None and len(firestore_state["databases"][0]["docs"]) == 1
    pubsub_state = snapshot.read(data / "pubsub.json", "pubsub")
    assert pubsub_state is not None and len(pubsub_state["subscriptions"][0]["messages"]) == 1
    storage_state = snapshot.read(data / "storage" / "storage.json", "storage")
    assert storage_state is not None and list(storage_state["files"]) == ["media/o"]


def test_pubsub_signs_push_tokens_with_the_key_behind_the_exported_certs_url(
    launchers: list[Launcher],
) -> None:
    launcher = Launcher(*ALL_FREE)
    launchers.append(launcher)
    env = launcher.wait_ready()
    pubsub_admin = launcher.notes["pubsub admin"]
    pubsub_certs = requests.get(pubsub_admin + "/oauth2/v1/certs", timeout=5).json()
    issuer_certs = requests.get(env["JOBS_OIDC_CERTS_URL"], timeout=5).json()
    assert pubsub_certs == issuer_certs
    assert launcher.terminate(signal.SIGINT) == 0  # Ctrl-C stops it as cleanly as SIGTERM
    assert not accepts(env["PUBSUB_EMULATOR_HOST"])


@pytest.mark.parametrize(
    ("flag", "component"),
    [
        ("--pubsub-port", "pubsub"),
        ("--firestore-admin-port", "firestore admin"),
        ("--storage-port", "storage"),
    ],
)
def test_a_port_in_use_is_named_and_exits_2(flag: str, component: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = [a for a in ALL_FREE if not a.startswith(flag + "=")] + [f"{flag}={port}"]
        result = subprocess.run(
            [sys.executable, "-m", "emulators", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"{component}: port {port} on 127.0.0.1 is already in use" in result.stderr
    assert READY_LINE not in result.stdout


def test_two_components_given_the_same_port_is_refused() -> None:
    port = free_port("127.0.0.1")
    with pytest.raises(PortInUse, match=f"storage and oidc are both given port {port}"):
        check_ports_free("127.0.0.1", Ports(0, 0, 0, 0, oidc=port, storage=port))


def test_official_without_gcloud_on_path_explains_how_to_get_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emulators", "--official", *ALL_FREE],
        cwd=REPO,
        env={**os.environ, "PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "gcloud" in result.stderr
    assert "https://cloud.google.com/sdk/docs/install" in result.stderr


# A stand-in for the gcloud CLI (not installable here): it listens on --host-port and, like
# gcloud starting a JVM, leaves a grandchild in its process group; both record their PIDs.
FAKE_GCLOUD = textwrap.dedent(
    """\
    #!{python}
    import os, socket, subprocess, sys, time
    args = sys.argv[1:]
    if os.environ.get("FAKE_GCLOUD_FAIL"):
        sys.exit(3)
    host_port = [a for a in args if a.startswith("--host-port=")][0].split("=", 1)[1]
    host, port = host_port.rsplit(":", 1)
    name = "firestore" if "firestore" in args else "pubsub"
    log = os.path.join(os.environ["FAKE_GCLOUD_DIR"], name)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(log, "w") as out:
        out.write(f"{{os.getpid()}} {{grandchild.pid}} {{' '.join(args)}}\\n")
    server = socket.socket()
    server.bind((host, int(port)))
    server.listen()
    while True:
        conn, _ = server.accept()
        conn.close()
    """
)


@pytest.fixture
def fake_gcloud(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "gcloud"
    script.write_text(FAKE_GCLOUD.format(python=sys.executable))
    script.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_GCLOUD_DIR": str(tmp_path),
    }


def test_official_runs_gcloud_children_and_stops_their_whole_process_groups(
    launchers: list[Launcher], fake_gcloud: dict[str, str], tmp_path: Path
) -> None:
    launcher = Launcher("--official", "--project=p1", *ALL_FREE, env=fake_gcloud)
    launchers.append(launcher)
    env = launcher.wait_ready()
    assert accepts(env["FIRESTORE_EMULATOR_HOST"])
    assert accepts(env["PUBSUB_EMULATOR_HOST"])
    firestore_pid, firestore_grandchild, firestore_args = (
        (tmp_path / "firestore").read_text().split(" ", 2)
    )
    pubsub_pid, pubsub_grandchild, pubsub_args = (tmp_path / "pubsub").read_text().split(" ", 2)
    assert firestore_args.split() == [
        "emulators",
        "firestore",
        "start",
        f"--host-port={env['FIRESTORE_EMULATOR_HOST']}",
    ]
    assert pubsub_args.split() == [
        "beta",
        "emulators",
        "pubsub",
        "start",
        "--project=p1",
        f"--host-port={env['PUBSUB_EMULATOR_HOST']}",
    ]
    pids = [int(p) for p in (firestore_pid, firestore_grandchild, pubsub_pid, pubsub_grandchild)]
    assert all(pid_alive(pid) for pid in pids)

    assert launcher.terminate() == 0
    deadline = time.monotonic() + 10
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)  # grandchildren are reparented to init, which reaps them asynchronously
    assert [pid for pid in pids if pid_alive(pid)] == []


def test_official_reports_a_gcloud_child_that_dies_at_start(
    fake_gcloud: dict[str, str],
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emulators", "--official", *ALL_FREE],
        cwd=REPO,
        env={**fake_gcloud, "FAKE_GCLOUD_FAIL": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "firestore:" in result.stderr
    assert "exited with 3" in result.stderr


def test_firestore_is_strict_about_composite_indexes_by_default(
    launchers: list[Launcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core import exceptions
    from google.cloud.firestore_v1.base_query import FieldFilter

    launcher = Launcher(*ALL_FREE)
    launchers.append(launcher)
    env = launcher.wait_ready()
    assert launcher.notes["firestore strict"] == ("indexes from services.jobs.schema")
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", env["FIRESTORE_EMULATOR_HOST"])
    db = firestore.Client(project=env["GOOGLE_CLOUD_PROJECT"])
    declared = db.collection("jobs").where(filter=FieldFilter("state", "==", "deferred"))
    assert list(declared.order_by("due_at").stream()) == []
    with pytest.raises(exceptions.FailedPrecondition, match="requires an index"):
        list(declared.order_by("subject").stream())
    assert launcher.terminate() == 0


def test_unloadable_firestore_indexes_stop_the_launch_with_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "firestore.indexes.json"
    result = subprocess.run(
        [sys.executable, "-m", "emulators", *ALL_FREE, "--firestore-indexes", str(missing)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"error: firestore indexes: {missing}" in result.stderr
    assert READY_LINE not in result.stdout
