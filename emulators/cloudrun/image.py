"""The front end's container mode: the service's container image run with podman.

`run_argv(image, ...)` is a command the front end runs as its container (`Container.run`), so
the image gets what Cloud Run gives a container: `PORT`, `K_SERVICE`, `K_REVISION`,
`K_CONFIGURATION` (passed by name: podman copies each `--env NAME` from its own environment,
which the front end sets), and its own `FUNCTION_TARGET` / `FUNCTION_SOURCE`, as infra/env.py
sets them per service. podman's foreground `run` forwards SIGTERM to the container's PID 1
(`--sig-proxy`, the default), which the Dockerfile's `exec` makes functions-framework, so the
front end's stop drains the service as Cloud Run's does.

Where it differs from Cloud Run, on purpose (docs/image.md): the container shares the host's
network (`--network host`) and listens on 127.0.0.1 only (`HOST`, functions-framework's
`--host` default). The emulators listen on 127.0.0.1 only, and every URL the services are
given (emulator hosts, token audiences, the issuer's certs) is a 127.0.0.1 URL that must mean
the same inside and outside the container; a container on a network of its own reaches the
host's loopback under another address, if at all. Cloud Run's container has its own network
namespace and listens on all interfaces.

Host facts (https://docs.podman.io/en/latest/markdown/podman-run.1.html): `--runtime runc`,
because crun refuses hosts with mixed cgroup v1/v2; explicit `--ulimit`, because podman's
default limits can exceed the host's hard limits and then fail to start the container.
"""

from __future__ import annotations

import resource
import secrets
import subprocess
from collections.abc import Iterable, Sequence

from emulators.cloudrun.contract import ENV_CONFIGURATION, ENV_PORT, ENV_REVISION, ENV_SERVICE

PODMAN = "podman"
RUNTIME = "runc"
NPROC = 4096
# Every container this mode starts carries this label, valued with the caller's run ID, so
# whatever a crash leaves behind can be found and removed (`remove_containers`).
RUN_LABEL = "deferred-jobs.run"
CLOUD_RUN_ENV = (ENV_PORT, ENV_SERVICE, ENV_REVISION, ENV_CONFIGURATION)
LOOPBACK = "127.0.0.1"


def function_source(target: str) -> str:
    """The image's FUNCTION_SOURCE of `target` (infra/env.py FUNCTION_SOURCES; a test agrees)."""
    return f"services/{target}/main.py"


def ulimits() -> list[str]:
    """`--ulimit` flags within this host's hard limits."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = hard if hard != resource.RLIM_INFINITY else 1 << 20
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={NPROC}:{NPROC}"]


def run_argv(
    image: str,
    target: str,
    env_names: Iterable[str],
    *,
    run_id: str,
    podman: str = PODMAN,
) -> list[str]:
    """`podman run` of `image` as the container of `target`, in the foreground, removed when it
    exits; `env_names` are copied from the front end's environment (values never appear in the
    command line, so no secret shows in `ps`)."""
    names = sorted({*CLOUD_RUN_ENV, *env_names})
    return [
        podman,
        "run",
        "--rm",
        f"--name=deferred-jobs-{target}-{secrets.token_hex(3)}",
        f"--label={RUN_LABEL}={run_id}",
        f"--runtime={RUNTIME}",
        *ulimits(),
        "--network=host",
        f"--env=HOST={LOOPBACK}",
        f"--env=FUNCTION_TARGET={target}",
        f"--env=FUNCTION_SOURCE={function_source(target)}",
        *(f"--env={name}" for name in names),
        image,
    ]


def containers(run_id: str | None = None, podman: str = PODMAN) -> list[str]:
    """Names of the containers (running or not) this mode started under `run_id` (None: under
    any run)."""
    label = RUN_LABEL if run_id is None else f"{RUN_LABEL}={run_id}"
    done = subprocess.run(
        [podman, "ps", "--all", f"--filter=label={label}", "--format={{.Names}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.split() if done.returncode == 0 else []


def remove_containers(run_id: str, podman: str = PODMAN) -> Sequence[str]:
    """Force-remove what `run_id` left behind (a front end killed before its container
    stopped); returns the names removed."""
    names = containers(run_id, podman)
    if names:
        subprocess.run(
            [podman, "rm", "--force", "--time=0", *names],
            capture_output=True,
            timeout=60,
            check=False,
        )
    return names
