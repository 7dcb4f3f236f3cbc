"""The `shards` key: one count, set as JOBS_SHARDS on every service that writes or claims jobs
(scan, worker, api), read back by each service's own Settings; Pulumi mocks, no cloud."""

from __future__ import annotations

import pytest

from infra.config import SETTINGS_BY_NAME, parse_config
from infra.errors import InfraConfigError
from services.api.settings import ApiSettings
from services.jobs.settings import SHARDS
from services.jobs.shard import MAX_SHARDS
from services.scan.settings import ScanSettings
from services.worker.settings import WorkerSettings
from tests.infra.conftest import StackRun, run_with_api, stack_config

SERVICE = "cloudrunv2/service:Service"
READERS = {
    "scan-service": ScanSettings.from_env,
    "worker-service": WorkerSettings.from_env,
    "api-service": ApiSettings.from_env,
}


def _jobs_envs(run: StackRun, name: str) -> dict[str, str]:
    container = run.one(SERVICE, name).state["template"]["containers"][0]
    return {e["name"]: e["value"] for e in container["envs"] if e["name"].startswith("JOBS_")}


@pytest.mark.parametrize("shards", [None, 4])
def test_every_service_gets_the_one_shard_count(shards: int | None) -> None:
    run = run_with_api("dev", {"shards": shards} if shards else None)
    for name, read in READERS.items():
        environ = _jobs_envs(run, name)
        assert environ[SHARDS] == str(shards or 1), name
        assert read(environ).shards == (shards or 1), name


def test_the_range_is_the_stores() -> None:
    setting = SETTINGS_BY_NAME["shards"]
    assert (setting.default, setting.low, setting.high) == (1, 1, MAX_SHARDS)


@pytest.mark.parametrize("bad", [0, MAX_SHARDS + 1, "four"])
def test_a_shard_count_out_of_range_fails_naming_the_key(bad: object) -> None:
    raw = {
        k.split(":", 1)[1] if k.startswith("deferred-jobs:") else k: v
        for k, v in stack_config("dev").items()
    }
    raw["shards"] = bad
    with pytest.raises(InfraConfigError, match="shards"):
        parse_config(raw)
