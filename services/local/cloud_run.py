"""The local stack's Cloud Run deployment: each service behind the local front end.

`infra/` deploys the scan, the worker and the api as Cloud Run services with the IAM invoker
check on, each invocable by its service accounts (the scheduler's for the scan, the push
invoker's for the worker, the configured callers for the api: locally the local producer), with
a request timeout and a container concurrency. Locally the same shape comes from
`emulators/cloudrun`: `front_end_argv` runs the service's functions-framework process as the
front end's container, so callers reach it only through the invoker check and the service sees
what it would see on Cloud Run (stripped tokens, `K_SERVICE`, `PORT`, a trace header). The
services are then configured as behind Cloud Run IAM. The timeouts and concurrencies are
infra's defaults (mirrored here because `infra/` needs Pulumi; a test proves they agree).

The container gets the server environment infra gives it (`infra/env.py`,
`server_environment`): one functions-framework thread per request the front end admits. Without
it the container ran 4 x CPUs threads (8 here) behind a front end that admits 80 (the api) or
10 (the worker), so admitted requests queued inside the container, past the front end's
concurrency queue and its 429, and a burst ended in 504 at the request timeout where Cloud Run
answers 429 (issue 33, finding 7).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from services.edge.resource_names import NAME_PREFIX
from services.local.topology import Topology

# infra/config.py defaults: scanAttemptDeadlineS (the scan service's request timeout),
# scanConcurrency, workerRequestTimeoutS, workerConcurrency, apiConcurrency; and infra/api.py's
# REQUEST_TIMEOUT_S and service name (ApiNames) for the default prefix.
SCAN_TIMEOUT_S = 180
SCAN_CONCURRENCY = 1
WORKER_TIMEOUT_S = 240
WORKER_CONCURRENCY = 10
API_TIMEOUT_S = 30
API_CONCURRENCY = 80
API_SERVICE = f"{NAME_PREFIX}-api"


@dataclass(frozen=True)
class Deployment:
    """One Cloud Run service as infra deploys it: name, invokers, timeout, concurrency."""

    target: str  # the functions-framework target: "scan", "worker" or "api"
    service: str
    invokers: tuple[str, ...]  # the emails with roles/run.invoker on it
    timeout_s: int
    concurrency: int

    def container_environment(self) -> dict[str, str]:
        """What infra's `server_environment(concurrency, timeout_s)` sets on the service: as
        many request threads as the front end admits requests (a test proves they agree)."""
        return {
            "THREADS": str(self.concurrency),
            "CLOUD_RUN_TIMEOUT_SECONDS": str(self.timeout_s),
            "THREADED_TIMEOUT_ENABLED": "false",
        }


def deployments(topology: Topology, api_callers: tuple[str, ...] = ()) -> dict[str, Deployment]:
    """The local services by target; the api only with callers (as infra: none, no api)."""
    names = topology.names
    deployed = {
        "scan": Deployment(
            "scan",
            names.scan_service,
            (topology.scheduler_email,),
            SCAN_TIMEOUT_S,
            SCAN_CONCURRENCY,
        ),
        "worker": Deployment(
            "worker",
            names.worker_service,
            (topology.pusher_email,),
            WORKER_TIMEOUT_S,
            WORKER_CONCURRENCY,
        ),
    }
    if api_callers:
        deployed["api"] = Deployment(
            "api", API_SERVICE, api_callers, API_TIMEOUT_S, API_CONCURRENCY
        )
    return deployed


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
        *(f"--invoker={email}" for email in deployment.invokers),
        f"--timeout={deployment.timeout_s}",
        f"--concurrency={deployment.concurrency}",
        "--log-level=WARNING",
        *([] if invoker_iam else ["--invoker-iam-disabled"]),
        "--",
        *container,
    ]
