"""The whole local system as `make run` starts it, for benchmarks that need every service:
the emulators in their own process (strict Firestore with the project's index set), the scan,
the worker and the api as functions-framework processes behind the local Cloud Run front end,
the Pub/Sub topology with the push subscription to the worker, and the strict local Cloud
Scheduler at the default stack's schedule (`* * * * *`, paced runs). No demo, fresh data, every
port free.

What it adds to services/local's `LocalSystem`: an environment of its own per service (a plug-in
on the api's PYTHONPATH and not on the worker's), a restart of one service with another
environment (a new worker revision), and the api's caller tokens. Not a benchmark itself (no
`bench_` prefix). Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any


def _stack_class() -> Any:
    """FullStack, built on services/local's LocalSystem (imported late: no work at import)."""
    from emulators.scheduler.attempt import token_from_issuer_url
    from services.local.system import LocalSystem

    class FullStack(LocalSystem):
        """`make run`'s stack with per-service environments; `scheduler` starts the trigger."""

        def __init__(self, options: Any, service_env: Mapping[str, Mapping[str, str]]) -> None:
            super().__init__(options, io.StringIO())  # its progress lines: not shown
            self.service_env = {k: dict(v) for k, v in service_env.items()}
            self._started: dict[str, tuple[int, dict[str, str]]] = {}

        def _start_function(self, target: str, port: int, env: Mapping[str, str]) -> Any:
            self._started[target] = (port, dict(env))
            return super()._start_function(
                target, port, {**env, **self.service_env.get(target, {})}
            )

        def restart(self, target: str, env: Mapping[str, str]) -> None:
            """Stop `target`'s process (its front end and the service under it: one process
            group this stack started) and start it again on the same port with `env` added:
            a new revision of that service."""
            [child] = [c for c in self.supervisor.children if c.name == target]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
            try:
                child.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.process.wait()
            self.supervisor.children.remove(child)
            port, started_env = self._started[target]
            self.service_env[target] = {**self.service_env.get(target, {}), **env}
            self.wait_listening([self._start_function(target, port, started_env)])

        def scheduler(self, on_attempt: Callable[[Any], None]) -> Any:
            return self._scheduler(on_attempt)

        def api_token(self) -> str:
            """An ID token of the local producer for the api (the local issuer's)."""
            mint = token_from_issuer_url(self._token_url())
            return str(mint(self.endpoints.api_url, self.api_caller_email))

    return FullStack


@contextlib.contextmanager
def full_stack(
    name: str,
    *,
    http_targets: Mapping[str, Any] | None = None,
    service_env: Mapping[str, Mapping[str, str]] | None = None,
    shards: int = 1,
) -> Iterator[Any]:
    """The stack (JOBS_SHARDS=`shards` everywhere, the emulator's index set of that N),
    started; stopped (every child process) on the way out."""
    from services.local.system import Options, Ports

    with tempfile.TemporaryDirectory(prefix=f"stack-{name}-") as folder:
        options = Options(
            ports=Ports.all_free(),
            project=f"bench-{name}",
            demo=False,
            fresh=True,
            log_dir=Path(folder),
            http_targets=dict(http_targets or {}),
            shards=shards,
        )
        stack = _stack_class()(options, service_env or {})
        try:
            stack.start()
            yield stack
        finally:
            stack.stop()
