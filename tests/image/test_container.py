"""The built image, container by container: who it runs as, where its code and writable paths
are, what it must not hold, how a bad setting and a stop end it, and that it installed exactly
constraints.txt."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from emulators.cloudrun import image as container_image
from services.api import settings as api_keys
from services.edge import scan_deployment
from services.edge import settings as common_keys
from services.scan import settings as scan_keys
from services.worker import settings as worker_keys
from tests.image import podman
from tests.image.constraints import read_pins

pytestmark = pytest.mark.image

APP_UID = 10001
# Emulator hosts on a port nothing listens on: the client libraries then use anonymous
# credentials instead of probing a metadata server the container cannot reach.
NOWHERE = {
    "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9",
    "PUBSUB_EMULATOR_HOST": "127.0.0.1:9",
    "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9",
}
CALLER = "caller@acme-jobs.iam.gserviceaccount.com"
VALID: dict[str, dict[str, str]] = {
    "scan": {
        common_keys.PROJECT: "acme-jobs",
        scan_deployment.TOPIC: "deferred-jobs-jobs",
        scan_keys.SCAN_AUDIENCE: "http://127.0.0.1:9/scan",
        scan_keys.SCAN_ALLOWED_INVOKERS: CALLER,
    },
    "worker": {
        common_keys.PROJECT: "acme-jobs",
        worker_keys.WORKER_AUDIENCE: "http://127.0.0.1:9/worker",
        worker_keys.WORKER_ALLOWED_INVOKERS: CALLER,
        worker_keys.MEDIA_BUCKET: "acme-media",
    },
    "api": {
        common_keys.PROJECT: "acme-jobs",
        api_keys.API_AUDIENCE: "http://127.0.0.1:9/api",
        api_keys.API_ALLOWED_CALLERS: CALLER,
    },
}
# Root certificate bundles the dependencies ship (certifi's, grpc's): data of the pinned wheels.
DEPENDENCY_BUNDLES = ("/certifi/cacert.pem", "/grpc/_cython/_credentials/roots.pem")
# Where a denied write or an unwritable HOME shows up in a container's output.
PERMISSION_ERRORS = ("Permission denied", "PermissionError", "Read-only file system")


def _target_env(target: str) -> dict[str, str]:
    return {
        "FUNCTION_TARGET": target,
        "FUNCTION_SOURCE": container_image.function_source(target),
        **VALID[target],
    }


# --- who and where -----------------------------------------------------------------------------


def test_it_runs_as_the_unprivileged_user_whose_home_alone_is_writable(app_image: str) -> None:
    out = podman.shell(
        app_image,
        'id -u; id -g; echo "$HOME"; '
        'for p in "$HOME" /app /app/services/ "$(python -c "import site; '
        'print(site.getsitepackages()[0])")" /opt /usr; do '
        '  if [ -w "$p" ]; then echo "writable $p"; else echo "readonly $p"; fi; done',
    ).split("\n")
    uid, gid, home, *paths = [line for line in out if line]
    assert (int(uid), int(gid)) == (APP_UID, APP_UID)
    assert home == "/home/app"
    assert paths[0] == f"writable {home}"
    assert all(line.startswith("readonly ") for line in paths[1:]), paths


def test_the_code_runs_from_the_installed_package_and_app_holds_only_a_link_to_it(
    app_image: str,
) -> None:
    out = podman.shell(
        app_image,
        "ls -A /app; readlink -f /app/services; "
        "python - <<'PY'\n"
        "import os, site, services.worker.main as m\n"
        "print(os.path.realpath(m.__file__))\n"
        "print(site.getsitepackages()[0])\n"
        "PY",
    ).split()
    listing, resolved, module, site_packages = out
    assert listing == "services"
    assert resolved == f"{site_packages}/services"
    assert module == f"{site_packages}/services/worker/main.py"


# --- what it must not hold ---------------------------------------------------------------------


def _files(image: str) -> set[str]:
    return set(
        podman.shell(
            image,
            "find / -xdev \\( -path /proc -o -path /sys -o -path /dev \\) -prune "
            "-o \\( -type f -o -type l \\) -print",
            as_root=True,
        ).split()
    )


def test_the_image_adds_no_test_infra_secret_or_key_file_to_its_base(
    app_image: str, base_image: str
) -> None:
    added = _files(app_image) - _files(base_image)
    site = podman.shell(app_image, "python -c 'import site; print(site.getsitepackages()[0])'")
    site_packages = site.strip()
    # useradd's backups of the account files it changed.
    accounts = ("/etc/passwd-", "/etc/group-", "/etc/shadow-", "/etc/gshadow-")
    allowed = (f"{site_packages}/", "/opt/venv/bin/", "/home/app/", "/app/services", *accounts)
    assert added, "the build added nothing?"
    assert [f for f in added if not f.startswith(allowed)] == []
    ours = [f.removeprefix(f"{site_packages}/") for f in added if f.startswith(site_packages)]
    forbidden_tops = {"tests", "infra", "emulators"}
    assert {f.split("/", 1)[0] for f in ours} & forbidden_tops == set()
    names = [Path(f).name for f in added]
    assert [n for n in names if n in ("conftest.py", "Pulumi.yaml", "Dockerfile", ".env")] == []
    assert [n for n in names if n.startswith("Pulumi.") and n.endswith(".yaml")] == []
    secrets = (".key", ".p12", ".pfx", "application_default_credentials.json", "id_rsa")
    assert [f for f in added if f.endswith(secrets)] == []
    # The only certificate files the install adds are the dependencies' own root bundles.
    certificates = [f for f in added if f.endswith((".pem", ".crt"))]
    assert all(f.endswith(DEPENDENCY_BUNDLES) for f in certificates), certificates


def _pem_blocks(text: str) -> set[str]:
    blocks, current = set(), []
    for line in text.splitlines():
        if line.startswith("-----BEGIN CERTIFICATE"):
            current = [line]
        elif current:
            current.append(line)
            if line.startswith("-----END CERTIFICATE"):
                blocks.add("\n".join(current))
                current = []
    return blocks


def test_the_hosts_ca_bundle_was_mounted_for_the_build_but_is_not_in_the_image(
    app_image: str, base_image: str
) -> None:
    bundle = "cat /etc/ssl/certs/ca-certificates.crt"
    in_image = podman.shell(app_image, bundle)
    assert in_image == podman.shell(base_image, bundle)  # the build left the system's alone
    bundled = podman.shell(
        app_image,
        "cd \"$(python -c 'import site; print(site.getsitepackages()[0])')\" && "
        f"cat {' '.join(path.lstrip('/') for path in DEPENDENCY_BUNDLES)}",
    )
    # Certificates this host trusts beyond Debian's (a TLS-intercepting proxy's CA, if any).
    host_only = _pem_blocks(podman.HOST_CA_BUNDLE.read_text()) - _pem_blocks(in_image)
    assert not host_only & (_pem_blocks(in_image) | _pem_blocks(bundled))


def test_it_installed_exactly_the_constraints(app_image: str) -> None:
    frozen = read_pins(podman.shell(app_image, "pip freeze --exclude deferred-jobs"))
    assert frozen == read_pins((podman.ROOT / "constraints.txt").read_text())


# --- a bad setting ends the start --------------------------------------------------------------


@pytest.mark.parametrize("target", sorted(VALID))
def test_valid_settings_pass_the_check_a_bad_one_exits_2_naming_the_key(
    app_image: str, target: str
) -> None:
    env = {**_target_env(target), **NOWHERE}
    check = ["python", "-m", f"services.{target}.main"]
    assert podman.run(app_image, *check, env=env).returncode == 0
    bad = podman.run(app_image, env={**env, common_keys.TERMINAL_RETENTION_S: "forever"})
    assert bad.returncode == 2, bad.stdout + bad.stderr
    lines = [json.loads(line) for line in (bad.stdout + bad.stderr).splitlines() if line]
    (line,) = [line for line in lines if line.get("event") == "settings_invalid"]
    assert line["keys"] == [common_keys.TERMINAL_RETENTION_S]
    assert common_keys.TERMINAL_RETENTION_S in line["message"]
    assert "Traceback" not in bad.stdout + bad.stderr


# --- a stop drains ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SlowCerts:
    """An OIDC certs endpoint that answers after `release` is set: a request of the worker that
    needs the certs is in flight until then."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.asked.set()
                outer.release.wait(60)
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/certs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_certs() -> Iterator[SlowCerts]:
    certs = SlowCerts()
    yield certs
    certs.close()


def _token() -> str:
    def part(obj: dict[str, object]) -> str:
        import base64

        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'kid': 'k1', 'typ': 'JWT'})}.{part({'sub': 'x'})}.c2ln"


def test_sigterm_reaches_functions_framework_which_drains_an_in_flight_request_and_exits_0(
    app_image: str, slow_certs: SlowCerts
) -> None:
    port = _free_port()
    name = f"deferred-jobs-drain-{port}"
    env = {
        **_target_env("worker"),
        **NOWHERE,
        common_keys.OIDC_CERTS_URL: slow_certs.url,
        "PORT": str(port),
        "HOST": "127.0.0.1",
    }
    podman.podman(
        "run",
        "--detach",
        f"--name={name}",
        "--network=host",
        *podman.run_flags(),
        *(f"--env={k}={v}" for k, v in env.items()),
        app_image,
    )
    try:
        _wait_listening(port, name)
        answer: dict[str, object] = {}

        def push() -> None:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/",
                data=b"{}",
                headers={"Authorization": f"Bearer {_token()}"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=90) as response:
                    answer["status"] = response.status
            except urllib.error.HTTPError as exc:
                answer["status"] = exc.code
            except OSError as exc:
                answer["error"] = repr(exc)

        client = threading.Thread(target=push)
        client.start()
        assert slow_certs.asked.wait(60), "the push never reached the certs endpoint"
        # The request is now in flight inside the container: stop it as Cloud Run does
        # (SIGTERM, SIGKILL after 10 s) and let the certs answer only after the signal.
        stopper = threading.Thread(target=podman.podman, args=("stop", "--time=10", name))
        stopper.start()
        _wait_for_state(name, "stopping")
        slow_certs.release.set()
        client.join(90)
        stopper.join(90)
        state = json.loads(podman.podman("inspect", name).stdout)[0]["State"]
        logs = podman.podman("logs", name).stdout + podman.podman("logs", name).stderr
    finally:
        podman.podman("rm", "--force", name, check=False)
    # The in-flight request got its answer (an empty certs map: the token is refused), and the
    # server exited by itself: 0, not 137 (killed after the grace).
    assert answer.get("status") in (401, 403), answer
    assert state["ExitCode"] == 0, state
    assert not any(error in logs for error in PERMISSION_ERRORS), logs


def _wait_listening(port: int, name: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        state = podman.podman("inspect", "--format={{.State.Status}}", name).stdout.strip()
        assert state == "running", podman.podman("logs", name).stderr
        time.sleep(0.5)
    raise AssertionError(f"{name} did not listen on {port}")


def _wait_for_state(name: str, wanted: str, timeout_s: float = 30) -> None:
    """Until podman reports the container `wanted` (stop sent) or already exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["podman", "inspect", "--format={{.State.Status}}", name],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.stdout.strip() in (wanted, "exited"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never reached {wanted}")
