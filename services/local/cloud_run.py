"""The local stack's Cloud Run deployment: each service behind the local front end.

`infra/` deploys the scan and the worker as Cloud Run services with the IAM invoker check on,
each invocable by one service account (the scheduler's for the scan, the push invoker's for the
worker), with a request timeout and a container concurrency. Locally the same shape comes from
`emulators/cloudrun`: `front_end_argv` runs the service's functions-framework process as the
front end's container, so callers reach it only through the invoker check and the service sees
what it would see on Cloud Run (stripped tokens, `K_SERVICE`, `PORT`, a trace header). The
services are then configured as behind Cloud Run IAM. The timeouts and concurrencies are
infra's defaults (mirrored here because `infra/` needs Pulumi; a test proves they agree).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from services.local.topology import Topology

# infra/config.py defaults: scanAttemptDeadlineS (the scan service's request timeout),
# scanConcurrency, workerRequestTimeoutS, workerConcurrency.
SCAN_TIMEOUT_S = 180
SCAN_CONCURRENCY = 1
WORKER_TIMEOUT_S = 240
WORKER_CONCURRENCY = 10


@dataclass(frozen=True)
class Deployment:
    """One Cloud Run service as infra deploys it: name, sole invoker, timeout, concurrency."""

    target: str  # the functions-framework target: "scan" or "worker"
    service: str
    invoker: str
    timeout_s: int
    concurrency: int


def deployments(topology: Topology) -> dict[str, Deployment]:
    names = topology.names
    return {
        "scan": Deployment(
            "scan", names.scan_service, topology.scheduler_email, SCAN_TIMEOUT_S, SCAN_CONCURRENCY
        ),
        "worker": Deployment(
            "worker",
            names.worker_service,
            topology.pusher_email,
            WORKER_TIMEOUT_S,
            WORKER_CONCURRENCY,
        ),
    }


def front_end_argv(
    deployment: Deployment,
    container: Sequence[str],
    *,
    host: str,
    port: int,
    certs_url: str,
    invoker_iam: bool = True,
) -> list[str]:
    """`python -m emulators.cloudrun ... -- CONTAINER`: the front end on host:port before it;
    `invoker_iam=False` deploys it as with `invoker_iam_disabled`."""
    return [
        sys.executable,
        "-m",
        "emulators.cloudrun",
        f"--service={deployment.service}",
        f"--host={host}",
        f"--port={port}",
        f"--certs-url={certs_url}",
        f"--invoker={deployment.invoker}",
        f"--timeout={deployment.timeout_s}",
        f"--concurrency={deployment.concurrency}",
        "--log-level=WARNING",
        *([] if invoker_iam else ["--invoker-iam-disabled"]),
        "--",
        *container,
    ]
