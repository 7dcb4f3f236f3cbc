"""The JOBS_* variables each stack sets are exactly the ones its service's Settings read.

`infra/env.py` imports the names from the services' settings modules; these tests check the
other half of the contract on the resources the program registers: each Cloud Run service gets
only variables its Settings actually look up (recorded on the mapping handed to `from_env`),
and the values build valid Settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from infra import env
from services.edge.settings import CLOUD_RUN_SERVICE
from services.scan import settings as scan_keys
from services.scan.settings import ScanSettings
from services.worker import settings as worker_keys
from services.worker.settings import WorkerSettings
from tests.infra.conftest import StackRun, run_stack

# Read by functions-framework, not by our Settings: the function pair and the server's threads
# and request timeout (tests/infra/test_server.py checks those).
FUNCTIONS_FRAMEWORK = {env.FUNCTION_TARGET, env.FUNCTION_SOURCE, *env.SERVER_VARIABLES}
SERVICES: dict[str, tuple[tuple[str, ...], tuple[str, ...], Callable[[Mapping[str, str]], Any]]] = {
    # service: (what infra declares, what its Settings module lists, how it reads them)
    "scan": (env.SCAN_VARIABLES, scan_keys.ALL_KEYS, ScanSettings.from_env),
    "worker": (env.WORKER_VARIABLES, worker_keys.ALL_KEYS, WorkerSettings.from_env),
}


class RecordingEnviron(Mapping[str, str]):
    """An environment that remembers every key looked up, present or not."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)
        self.looked_up: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.looked_up.add(key)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _service(run: StackRun, key: str) -> Mapping[str, Any]:
    return run.one("cloudrunv2/service:Service", f"{key}-service").state


def _project(run: StackRun, key: str) -> str:
    return str(_service(run, key)["project"])


def _envs(run: StackRun, key: str) -> dict[str, str]:
    service = _service(run, key)
    return {item["name"]: item["value"] for item in service["template"]["containers"][0]["envs"]}


def _jobs_envs(run: StackRun, key: str) -> dict[str, str]:
    """The JOBS_* of `key`, plus the K_SERVICE Cloud Run sets in every container (the
    behind-IAM flag requires it)."""
    jobs = {name: value for name, value in _envs(run, key).items() if name.startswith("JOBS_")}
    return {**jobs, CLOUD_RUN_SERVICE: f"deferred-jobs-{key}"}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_each_service_gets_exactly_its_declared_variables_and_the_function_pair(
    stack: StackRun, service: str
) -> None:
    declared = SERVICES[service][0]
    names = list(_envs(stack, service))
    assert len(names) == len(set(names))
    assert set(names) == set(declared) | FUNCTIONS_FRAMEWORK


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_each_service_settings_read_every_variable_the_stack_sets(
    stack: StackRun, service: str
) -> None:
    _, all_keys, from_env = SERVICES[service]
    environ = RecordingEnviron(_jobs_envs(stack, service))
    from_env(environ)
    assert set(environ) <= environ.looked_up
    # ALL_KEYS is the services' published list; it must name everything they look up.
    assert environ.looked_up - {CLOUD_RUN_SERVICE} <= set(all_keys)


def test_scan_settings_built_from_the_stack_carry_its_values(stack: StackRun) -> None:
    scan = ScanSettings.from_env(_jobs_envs(stack, "scan"))
    assert scan.project == _project(stack, "scan")
    assert scan.audience == stack.outputs["scan_url"]
    assert scan.topic == stack.outputs["topic"]
    assert scan.metrics == env.SCAN_METRICS


def test_worker_settings_built_from_the_stack_carry_its_values(stack: StackRun) -> None:
    environ = _jobs_envs(stack, "worker")
    worker = WorkerSettings.from_env(environ)
    assert worker.project == _project(stack, "worker")
    assert worker.audience == stack.outputs["worker_url"]
    assert worker.lease_s == int(environ[worker_keys.WORKER_LEASE_S])
    assert worker.media_bucket == environ[worker_keys.MEDIA_BUCKET]


def test_both_services_keep_terminal_records_for_the_configured_days() -> None:
    from services.edge.settings import TERMINAL_RETENTION_S

    run = run_stack("dev", overrides={"terminalRetentionDays": 9, "enqueuedTimeoutS": 12_345})
    for service, (declared, _, from_env) in SERVICES.items():
        assert TERMINAL_RETENTION_S in declared
        environ = _jobs_envs(run, service)
        assert environ[TERMINAL_RETENTION_S] == str(9 * 86400)
        assert from_env(environ).terminal_retention_s == 9 * 86400
    scan = ScanSettings.from_env(_jobs_envs(run, "scan"))
    assert scan.enqueued_timeout_s == 12_345
    assert scan.limits().enqueued_timeout_s == 12_345


def test_the_scan_measures_stale_enqueued_with_the_configured_timeout(stack: StackRun) -> None:
    environ = _jobs_envs(stack, "scan")
    scan = ScanSettings.from_env(environ)
    assert scan.enqueued_timeout_s == int(environ[scan_keys.ENQUEUED_TIMEOUT_S])
