"""A service target run as Cloud Run runs it, for tests and benchmarks: `python -m
services.edge.server` (the image's server) as the container of a local Cloud Run front end
(`python -m emulators.cloudrun`), configured only through JOBS_* variables, behind IAM.

`Deployed.url` is the service URL (the front end); `container_url` reaches the container as
only Cloud Run could (for the "directly" half of a test). Stopped by its own PID.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from emulators.cloudrun.__main__ import READY_LINE
from emulators.launcher import free_port
from services.api import settings as api_keys
from services.edge import scan_deployment
from services.edge import settings as common
from services.scan import settings as scan_keys
from services.worker import settings as worker_keys

ROOT = Path(__file__).resolve().parents[3]
INVOKER = "invoker@test-project.iam.gserviceaccount.com"
TARGETS = ("api", "scan", "worker")


def target_environment(
    target: str, project: str, url: str, certs_url: str, invokers: tuple[str, ...] = (INVOKER,)
) -> dict[str, str]:
    """The JOBS_* a stack gives `target` at service URL `url`, `invokers` its callers."""
    callers = ",".join(invokers)
    base = {
        common.PROJECT: project,
        common.OIDC_CERTS_URL: certs_url,
        common.BEHIND_CLOUD_RUN_IAM: "true",
    }
    own = {
        "api": {api_keys.API_AUDIENCE: url, api_keys.API_ALLOWED_CALLERS: callers},
        "scan": {
            scan_deployment.TOPIC: "deferred-jobs",
            scan_keys.SCAN_AUDIENCE: url,
            scan_keys.SCAN_ALLOWED_INVOKERS: callers,
            scan_keys.METRICS: "log",
        },
        "worker": {
            worker_keys.WORKER_AUDIENCE: url,
            worker_keys.WORKER_ALLOWED_INVOKERS: callers,
        },
    }[target]
    return {**base, **own}


@dataclass
class Deployed:
    target: str
    url: str
    container_url: str
    process: subprocess.Popen[str]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


def deploy(
    target: str,
    project: str,
    certs_url: str,
    *,
    concurrency: int = 80,
    extra_env: Mapping[str, str] | None = None,
    invokers: tuple[str, ...] = (INVOKER,),
) -> Deployed:
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBS_", "K_"))}
    env.update(target_environment(target, project, url, certs_url, invokers))
    env.update({"PYTHONUNBUFFERED": "1", "THREADS": str(concurrency), **(extra_env or {})})
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulators.cloudrun",
            f"--service=deferred-jobs-{target}",
            f"--port={port}",
            f"--certs-url={certs_url}",
            *(f"--invoker={email}" for email in invokers),
            f"--concurrency={concurrency}",
            "--",
            sys.executable,
            "-m",
            "services.edge.server",
            f"--target={target}",
            f"--source=services/{target}/main.py",
            "--host=127.0.0.1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=None if os.environ.get("EDGE_DEBUG") else subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"on port (\d+)", line)
    if not line.startswith(READY_LINE) or match is None:
        process.kill()
        raise AssertionError(f"{target} did not start: {line!r}")
    # The container's log lines come through this pipe: read them for as long as it runs, or
    # once the pipe's buffer fills every request thread blocks on its log line.
    output = process.stdout
    threading.Thread(
        target=lambda: collections.deque(output, maxlen=200), name=f"{target}-log", daemon=True
    ).start()
    return Deployed(target, url, f"http://127.0.0.1:{match.group(1)}", process)
