"""The service's process, started as Cloud Run starts a container.

It gets `PORT` (a free port of 127.0.0.1 chosen here), `K_SERVICE`, `K_REVISION` and
`K_CONFIGURATION` in its environment, and must listen on `PORT` within the startup timeout, as
Cloud Run's default TCP startup probe requires
(https://cloud.google.com/run/docs/container-contract#port,
https://cloud.google.com/run/docs/configuring/healthchecks). It shares the front end's process
group, so whoever stops the front end's group stops the service too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emulators.cloudrun.contract import (
    ENV_CONFIGURATION,
    ENV_PORT,
    ENV_REVISION,
    ENV_SERVICE,
    STARTUP_TIMEOUT_S,
)
from emulators.cloudrun.proxy import wait_until_listening

logger = logging.getLogger(__name__)

_STOP_GRACE_S = 10.0


class StartupFailed(Exception):
    """The container did not listen on PORT in time, or exited first."""


def revision_name(service: str) -> str:
    """`SERVICE-00001-abc`, the shape of Cloud Run's revision names."""
    return f"{service}-00001-{secrets.token_hex(2)[:3]}"


def container_environment(
    base: Mapping[str, str], service: str, revision: str, port: int
) -> dict[str, str]:
    """`base` plus what Cloud Run sets; Cloud Run's values win."""
    return {
        **base,
        ENV_PORT: str(port),
        ENV_SERVICE: service,
        ENV_REVISION: revision,
        ENV_CONFIGURATION: service,
    }


@dataclass
class Container:
    """One running service process and the 127.0.0.1 port it listens on."""

    process: subprocess.Popen[bytes]
    port: int
    revision: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def run(
        cls,
        argv: Sequence[str],
        service: str,
        *,
        base_env: Mapping[str, str] | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> Container:
        port = _free_port()
        revision = revision_name(service)
        env = container_environment(
            os.environ if base_env is None else base_env, service, revision, port
        )
        try:
            process = subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise StartupFailed(f"cannot run {argv[0]}: {exc}") from exc
        container = cls(process, port, revision)
        if not wait_until_listening(
            "127.0.0.1", port, startup_timeout_s, alive=lambda: process.poll() is None
        ):
            container.stop()
            raise StartupFailed(
                f"{service}: the container failed to start and listen on the port defined by "
                f"the PORT environment variable ({port}) within {startup_timeout_s:g} s"
            )
        return container

    def stop(self, grace_s: float = _STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL after `grace_s` (Cloud Run's grace is 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                code = self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                logger.warning("container pid %d ignored SIGTERM; killing it", self.process.pid)
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                self.process.wait()
                return
            # A server that drains exits 0 (or dies of the SIGTERM itself); anything else is a
            # failed shutdown worth seeing in the front end's log.
            if code not in (0, -signal.SIGTERM):
                logger.warning("container pid %d exited %d after SIGTERM", self.process.pid, code)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
