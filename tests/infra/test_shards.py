"""The `shards` key: one count, set as JOBS_SHARDS on every service that writes or claims jobs
(scan, worker, api), read back by each service's own Settings; Pulumi mocks, no cloud."""

from __future__ import annotations

import pytest

from infra.config import SETTINGS_BY_NAME, parse_config
from infra.errors import InfraConfigError
from services.api.settings import ApiSettings
from services.edge.settings import SHARDS
from services.jobs import schema
from services.jobs.shard import MAX_SHARDS
from services.scan.settings import ScanSettings
from services.worker.settings import WorkerSettings
from tests.infra.conftest import DEPLOYER_CONFIG, StackRun, run_stack, stack_config

SERVICE = "cloudrunv2/service:Service"
READERS = {
    "scan-service": ScanSettings.from_env,
    "worker-service": WorkerSettings.from_env,
    "api-service": ApiSettings.from_env,
}


def _jobs_envs(run: StackRun, name: str) -> dict[str, str]:
    container = run.one(SERVICE, name).state["template"]["containers"][0]
    jobs = {e["name"]: e["value"] for e in container["envs"] if e["name"].startswith("JOBS_")}
    return {**jobs, "K_SERVICE": name}  # as Cloud Run sets it (the behind-IAM flag needs it)


@pytest.mark.parametrize("shards", [None, 4])
def test_every_service_gets_the_one_shard_count(shards: int | None) -> None:
    run = run_stack("dev", {"shards": shards} if shards else None)
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
        for k, v in {**stack_config("dev"), **DEPLOYER_CONFIG["dev"]}.items()
    }
    raw["shards"] = bad
    with pytest.raises(InfraConfigError, match="shards"):
        parse_config(raw)


# --- the index set follows the key --------------------------------------------------------

INDEX = "firestore/index:Index"
FIELD = "firestore/field:Field"


def _created_indexes(run: StackRun) -> tuple[schema.CompositeIndex, ...]:
    return tuple(
        schema.CompositeIndex(
            r.state["collection"],
            tuple(schema.IndexField(f["fieldPath"], f["order"]) for f in r.state["fields"]),
        )
        for r in run.of_type(INDEX)
    )


def _created_exemptions(run: StackRun) -> tuple[schema.IndexExemption, ...]:
    return tuple(
        schema.IndexExemption(r.state["collection"], r.state["field"])
        for r in run.of_type(FIELD)
        if r.state.get("indexConfig") == {"indexes": []}
    )


@pytest.mark.parametrize("shards", [1, 4])
def test_the_stack_creates_the_index_set_of_its_shard_count(shards: int) -> None:
    run = run_stack("dev", overrides={"shards": shards})
    indexes, exemptions = _created_indexes(run), _created_exemptions(run)
    assert set(indexes) == set(schema.composite_indexes(shards))
    assert len(indexes) == len(schema.composite_indexes(shards))
    ttl = {(t.collection, t.field) for t in schema.TTL_FIELDS}
    declared = {(e.collection, e.field) for e in schema.exemptions(shards)}
    assert {(e.collection, e.field) for e in exemptions} == declared | ttl
    # Every query that N runs is served by what the stack created, and nothing more is kept.
    for shape in schema.query_shapes(shards):
        assert schema.is_served(shape, indexes, exemptions), shape


def test_above_one_shard_the_stack_keeps_no_unsharded_timestamp_index() -> None:
    run = run_stack("dev", overrides={"shards": 4})
    indexes, exemptions = _created_indexes(run), _created_exemptions(run)
    assert all(schema.SHARD in i.field_paths for i in indexes if i.collection == schema.JOBS)
    exempt = {(e.collection, e.field) for e in exemptions}
    assert (schema.JOBS, "due_at") in exempt
    # The N = 1 queries are refused by this index set: the services must run at N = 4.
    assert not schema.is_served(schema.query_shapes(1)[0], indexes, exemptions)


def test_raising_the_shard_count_only_removes_indexes_and_adds_exemptions() -> None:
    # No index the N = 4 queries need is created by the change (they exist at N = 1 already),
    # so no query waits for an index build while the services switch.
    before = {r.name for r in run_stack("dev", overrides={"shards": 1}).of_type(INDEX)}
    after = {r.name for r in run_stack("dev", overrides={"shards": 4}).of_type(INDEX)}
    assert after < before
