"""`http.request` in the catalogue: its params are checked at schedule time against the
deployment's HTTP targets (the schema's deployment check), by every component that reads
`JOBS_HTTP_TARGETS` through the one reader; the worker binds it with its `build`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from services.api.settings import ApiSettings
from services.jobs.catalogue import Catalogue, built_in, load_catalogue
from services.jobs.deployment import Deployment
from services.jobs.errors import ValidationError
from services.jobs.http_request import ACTION_NAME, HTTP_REQUEST
from services.jobs.http_targets import TargetsError
from services.jobs.model import NewJob
from services.jobs.params import Field, ParamsSchema
from services.worker import settings as worker_keys
from services.worker.app import default_actions
from services.worker.http_request import IssuerIdTokens, MetadataIdTokens
from services.worker.settings import WorkerSettings

T0 = datetime(2026, 6, 1, tzinfo=UTC)
TARGETS = json.dumps({"trials": {"url": "https://trials.example", "rate": 5}})
DEPLOYMENT = Deployment.from_env({"JOBS_HTTP_TARGETS": TARGETS})


def _job(params: dict[str, Any]) -> NewJob:
    return NewJob("call-1", ACTION_NAME, "trial-1", T0, params)


def test_http_request_is_a_built_in_declared_with_a_build_factory() -> None:
    catalogue = built_in()
    assert catalogue.get(ACTION_NAME) is HTTP_REQUEST
    assert HTTP_REQUEST.build == "services.worker.http_request:build_http_request"
    assert HTTP_REQUEST.needs.settings == ("JOBS_HTTP_TARGETS",)
    assert [g.role for g in HTTP_REQUEST.needs.grants] == ["roles/run.invoker"]
    assert catalogue.default() == "media.delete_source"


def test_a_job_naming_a_configured_target_and_a_clean_path_is_accepted() -> None:
    catalogue = load_catalogue(deployment=DEPLOYMENT)
    params = {"target": "trials", "path": "/internal/trials/42:expire", "body": {"a": [1]}}
    assert _job(params).validated(catalogue).params == params


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"target": "billing", "path": "/x"}, "params.target: unknown target 'billing'"),
        ({"target": "trials", "path": "/a/../admin"}, "params.path: no '.' or '..'"),
        ({"target": "trials", "path": "//evil.example/x"}, "params.path: must not start"),
        ({"target": "trials", "path": "https://evil.example"}, "params.path: expected a path"),
        ({"target": "trials", "path": "/a/%2e%2e/b"}, "params.path: no '.' or '..'"),
        ({"target": "trials"}, "params.path is required for http.request"),
        ({"path": "/x"}, "params.target is required for http.request"),
        ({"target": "trials", "path": "/x", "method": "TRACE"}, "params.method 'TRACE' is not"),
        ({"target": "trials", "path": "/x", "method": "GET", "body": {}}, "params.body: a GET"),
        ({"target": "trials", "path": "/x", "url": "https://x"}, "params.url is not a field"),
    ],
)
def test_a_bad_target_or_path_is_refused_at_schedule_time_naming_the_field(
    params: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        _job(params).validated(load_catalogue(deployment=DEPLOYMENT))
    assert any(named in problem for problem in caught.value.problems), caught.value.problems


def test_with_no_targets_configured_every_http_request_job_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"none configured \(JOBS_HTTP_TARGETS\)"):
        _job({"target": "trials", "path": "/x"}).validated(load_catalogue())


def test_the_deployment_check_runs_only_once_the_fields_fit() -> None:
    seen: list[Deployment] = []

    def check(params: Any, deployment: Deployment) -> list[str]:
        seen.append(deployment)
        return ["params.n: too many for this deployment"]

    schema = ParamsSchema("a.b", (Field("n", "integer", required=True),), check=check)
    assert schema.problems({"n": "x"}, DEPLOYMENT) == ["params.n must be an integer"]
    assert seen == []
    assert schema.problems({"n": 1}, DEPLOYMENT) == ["params.n: too many for this deployment"]
    assert schema.problems({"n": 1}) == ["params.n: too many for this deployment"]
    assert seen == [DEPLOYMENT, Deployment()]


def test_a_catalogue_with_another_deployment_keeps_its_actions_and_sources() -> None:
    plain = load_catalogue()
    configured = plain.with_deployment(DEPLOYMENT)
    assert configured.names() == plain.names()
    assert configured.deployment is DEPLOYMENT and plain.deployment == Deployment()
    assert configured.params_problems(ACTION_NAME, {"target": "trials", "path": "/x"}) == []


def test_bad_targets_are_refused_by_the_one_reader_naming_the_key() -> None:
    with pytest.raises(TargetsError, match=r"JOBS_HTTP_TARGETS\.t\.url"):
        Deployment.from_env({"JOBS_HTTP_TARGETS": '{"t": {"url": "http://x.example"}}'})


API_ENV = {
    "JOBS_PROJECT": "demo",
    "JOBS_API_AUDIENCE": "https://api.example.run.app",
    "JOBS_API_ALLOWED_CALLERS": "producer@demo.iam.gserviceaccount.com",
}


def test_the_api_reads_the_targets_from_its_environment() -> None:
    settings = ApiSettings.from_env({**API_ENV, "JOBS_HTTP_TARGETS": TARGETS})
    assert settings.http_targets == DEPLOYMENT.http_targets
    with pytest.raises(Exception, match=r"JOBS_HTTP_TARGETS: JOBS_HTTP_TARGETS\.t\.rate"):
        ApiSettings.from_env(
            {**API_ENV, "JOBS_HTTP_TARGETS": '{"t": {"url": "https://t.example", "rate": -1}}'}
        )


WORKER_ENV = {
    "JOBS_PROJECT": "demo",
    "JOBS_WORKER_AUDIENCE": "https://worker.example.run.app",
    "JOBS_WORKER_ALLOWED_INVOKERS": "push@demo.iam.gserviceaccount.com",
    "JOBS_HTTP_TARGETS": TARGETS,
}


def test_the_worker_binds_http_request_with_metadata_tokens_by_default() -> None:
    settings = WorkerSettings.from_env(WORKER_ENV)
    registry = default_actions(settings, Catalogue([HTTP_REQUEST]))
    assert ACTION_NAME in registry
    run = registry.get(ACTION_NAME)
    assert run is not None and callable(run.run)
    assert settings.id_token_url is None


def test_the_local_worker_takes_its_tokens_from_the_issuer_for_its_own_email(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Any] = []
    monkeypatch.setattr(
        "services.worker.http_request.http_request_call",
        lambda targets, tokens, session: made.append((targets, tokens)) or (lambda r: None),
    )
    settings = WorkerSettings.from_env(
        {
            **WORKER_ENV,
            worker_keys.WORKER_ID_TOKEN_URL: "http://127.0.0.1:8090/token",
            worker_keys.WORKER_ID_TOKEN_EMAIL: "worker@demo.iam.gserviceaccount.com",
        }
    )
    default_actions(settings, Catalogue([HTTP_REQUEST]))
    [(targets, tokens)] = made
    assert targets == DEPLOYMENT.http_targets
    assert isinstance(tokens, IssuerIdTokens)
    default_actions(WorkerSettings.from_env(WORKER_ENV), Catalogue([HTTP_REQUEST]))
    assert isinstance(made[-1][1], MetadataIdTokens)


def test_the_issuers_url_and_email_come_together() -> None:
    with pytest.raises(Exception, match="set both JOBS_WORKER_ID_TOKEN_URL"):
        WorkerSettings.from_env({**WORKER_ENV, worker_keys.WORKER_ID_TOKEN_URL: "http://x/token"})
