"""The whole local system on the image: `python -m services.local --image`, the emulators on
this host and the scan, worker and api as podman containers behind the local Cloud Run front
ends. The demo's due jobs complete through the containers, and the stop drains them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emulators.cloudrun import image as container_image
from tests.image import podman
from tests.image.test_container import PERMISSION_ERRORS

pytestmark = pytest.mark.image

TARGETS = ("scan", "worker", "api")


def test_the_demo_completes_through_the_images_and_the_stop_drains_them(
    app_image: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.local",
            f"--image={app_image}",
            "--free-ports",
            "--fresh",
            "--exit-when-done",
            "--timeout=300",
            f"--log-dir={tmp_path}",
        ],
        cwd=podman.ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "demo done: 3/3 due jobs completed, 3/3 source files deleted" in done.stdout
    for target in TARGETS:
        assert f"image {app_image}" in _banner_line(done.stdout, target), done.stdout
    # The stop: every front end and its container ended within the grace, each container by
    # its own SIGTERM handling (the front end logs any other exit, container.py), and nothing
    # was left for the stack to remove.
    assert "still running" not in output and "killing it" not in output, output
    assert "removed containers" not in output, output
    logs = {target: (tmp_path / f"{target}.log").read_text() for target in TARGETS}
    for target, log in logs.items():
        assert "# cloud run ready" in log, (target, log[-2000:])
        assert "after SIGTERM" not in log and "ignored SIGTERM" not in log, (target, log[-3000:])
        assert "Traceback" not in log, (target, log[-3000:])
        assert not [e for e in PERMISSION_ERRORS if e in log], (target, log[-3000:])
        assert "Control server error" not in log, (target, log[-3000:])
    # The worker ran the jobs inside its container: its log lines name the installed package.
    assert "site-packages/services/worker/" in logs["worker"]
    # No container of any local run remains after its stack stopped.
    assert container_image.containers() == []


def _banner_line(stdout: str, target: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith(f"{target} "))
