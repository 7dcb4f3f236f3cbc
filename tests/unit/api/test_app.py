"""The API's HTTP behaviour on an in-memory store: status codes, error bodies, field names."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from services.jobs.ids import derive_job_id
from services.jobs.state import State
from tests.unit.api.conftest import Api
from tests.unit.api.contract import ACTION, DUE, PARAMS, schedule_body
from tests.unit.api.fakes import CALLER, STRANGER, T0


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    error: dict[str, Any] = response.get_json()["error"]
    assert error["code"] == status
    assert isinstance(error["message"], str) and error["message"]
    return error


def fields_of(error: dict[str, Any]) -> list[str]:
    return [v["field"] for v in error["details"][0]["fieldViolations"]]


def test_a_new_job_is_201_with_its_location_and_the_same_again_is_200(api: Api) -> None:
    first = api.post("/v1/jobs", schedule_body())
    assert first.status_code == 201
    assert first.headers["Location"] == "/v1/jobs/job-1"
    job = first.get_json()
    assert (job["job_id"], job["state"], job["due_at"]) == ("job-1", "deferred", DUE)
    again = api.post("/v1/jobs", schedule_body())
    assert again.status_code == 200
    assert again.get_json() == job


def test_a_different_payload_under_the_same_id_is_409_naming_the_field(api: Api) -> None:
    assert api.post("/v1/jobs", schedule_body()).status_code == 201
    error = error_of(
        api.post("/v1/jobs", schedule_body(params={**PARAMS, "bucket": "other-bucket"})), 409
    )
    assert error["status"] == "ALREADY_EXISTS"
    assert fields_of(error) == ["params.bucket"]


def test_a_decision_id_derives_the_job_id_as_the_python_store_does(api: Api) -> None:
    response = api.post("/v1/jobs", schedule_body(job_id=..., decision_id="retention-9"))
    assert response.status_code == 201
    assert response.get_json()["job_id"] == derive_job_id(ACTION, "media-1", "retention-9")


def test_a_delay_is_counted_from_the_request(api: Api) -> None:
    response = api.post("/v1/jobs", schedule_body(due_at=..., delay="2592000s"))
    assert response.status_code == 201
    assert response.get_json()["due_at"] == "2026-07-01T12:00:00Z"  # T0 + 30 days
    assert T0 + timedelta(days=30) == api.store.jobs["job-1"].due_at


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"action": "media.nope"}, "action"),
        ({"action": 7}, "action"),
        ({"subject": ""}, "subject"),
        ({"subject": ["x"]}, "subject"),
        ({"subject": "x" * 2000}, "subject"),
        ({"job_id": "a/b"}, "job_id"),
        ({"job_id": "__reserved__"}, "job_id"),
        ({"job_id": ...}, "job_id"),
        ({"decision_id": "d"}, "decision_id"),
        ({"due_at": "tomorrow"}, "due_at"),
        ({"due_at": 1767225600}, "due_at"),
        ({"due_at": "2026-07-01T12:00:00"}, "due_at"),
        ({"due_at": ...}, "due_at"),
        ({"delay": "30s"}, "delay"),
        ({"due_at": ..., "delay": "30d"}, "delay"),
        ({"due_at": ..., "delay": 30}, "delay"),
        ({"params": "bucket=b"}, "params"),
        ({"params": {"__x__": 1}}, "params"),
        ({"params": {"big": "x" * 20000}}, "params"),
        ({"params": {"n": 2**70}}, "params.n"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_each_bad_field_is_400_naming_it_and_writes_nothing(
    api: Api, overrides: dict[str, Any], field: str
) -> None:
    error = error_of(api.post("/v1/jobs", schedule_body(**overrides)), 400)
    assert error["status"] == "INVALID_ARGUMENT"
    assert field in fields_of(error)
    assert error["message"].startswith(field) or f"; {field}" in error["message"]
    assert api.store.jobs == {}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"", "body"),
        (b"[]", "body"),
        (b"null", "body"),
        (b"{", "body"),
        (b"\xff\xfe", "body"),
        (b'{"subject": NaN}', "body"),
        (b'{"action": "a", "action": "b"}', "action"),
        (b'{"subject": "\\ud800"}', "subject"),
        (b"[" * 5000, "body"),
        (b'{"params": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, "params"),
        (b'{"params": {"a": ' + b"[" * 900 + b"]" * 900 + b"}}", "params"),
        (b'{"max_attempts": ' + b"9" * 5000 + b"}", "body"),
    ],
)
def test_malformed_json_is_400_naming_where(api: Api, raw: bytes, field: str) -> None:
    error = error_of(api.post("/v1/jobs", raw=raw), 400)
    assert field in fields_of(error)
    assert api.store.jobs == {}


def test_an_oversized_body_is_413_and_not_read(api: Api) -> None:
    raw = b'{"params": {"x": "' + b"a" * 70_000 + b'"}}'
    error = error_of(api.post("/v1/jobs", raw=raw), 413)
    assert fields_of(error) == ["body"]
    assert api.store.calls == []


def test_a_body_that_is_not_declared_json_is_415(api: Api) -> None:
    response = api.post("/v1/jobs", schedule_body(), content_type="text/plain")
    assert fields_of(error_of(response, 415)) == ["Content-Type"]


def test_no_token_is_401_and_a_stranger_is_403_before_anything_is_read(api: Api) -> None:
    error = error_of(api.post("/v1/jobs", schedule_body(), auth=None), 401)
    assert error["status"] == "UNAUTHENTICATED"
    assert error_of(api.get("/v1/jobs/job-1", auth=STRANGER), 403)["status"] == "PERMISSION_DENIED"
    assert api.store.calls == []


def test_read_cancel_and_reschedule_a_job(api: Api) -> None:
    api.post("/v1/jobs", schedule_body())
    assert api.get("/v1/jobs/job-1").get_json()["state"] == "deferred"
    moved = api.post("/v1/jobs/job-1:reschedule", {"due_at": "2027-01-01T00:00:00Z"})
    assert moved.status_code == 200
    assert moved.get_json()["due_at"] == "2027-01-01T00:00:00Z"
    cancelled = api.post("/v1/jobs/job-1:cancel", {"reason": "decision withdrawn"})
    assert cancelled.status_code == 200
    job = cancelled.get_json()
    assert job["state"] == "cancelled"
    assert job["history"][-1]["reason"] == "decision withdrawn"
    assert job["history"][-1]["by"] == f"operator:api:{CALLER}"


def test_a_retried_cancel_answers_the_cancelled_job(api: Api) -> None:
    api.post("/v1/jobs", schedule_body())
    first = api.post("/v1/jobs/job-1:cancel")
    again = api.post("/v1/jobs/job-1:cancel")
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.get_json() == first.get_json()


def test_cancelling_a_completed_job_is_failed_precondition(api: Api) -> None:
    api.post("/v1/jobs", schedule_body())
    api.store.set_state("job-1", State.COMPLETED)
    error = error_of(api.post("/v1/jobs/job-1:cancel"), 400)
    assert error["status"] == "FAILED_PRECONDITION"
    assert fields_of(error) == ["state"]


def test_the_location_of_a_unicode_job_id_is_percent_encoded(api: Api) -> None:
    response = api.post("/v1/jobs", schedule_body(job_id="日本:1"))
    assert response.status_code == 201
    assert response.headers["Location"] == "/v1/jobs/%E6%97%A5%E6%9C%AC%3A1"
    assert api.get(response.headers["Location"]).get_json()["job_id"] == "日本:1"


def test_a_job_id_with_colons_is_addressed_by_its_last_colon(api: Api) -> None:
    job_id = derive_job_id(ACTION, "media-1", "retention-9")
    api.post("/v1/jobs", schedule_body(job_id=job_id))
    assert api.get(f"/v1/jobs/{job_id}").get_json()["job_id"] == job_id
    assert api.post(f"/v1/jobs/{job_id}:cancel").get_json()["state"] == "cancelled"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        # Not the caller's (it does not exist): 403, as for another producer's job (AIP-211).
        ("GET", "/v1/jobs/nosuch", 403),
        ("POST", "/v1/jobs/nosuch:cancel", 403),
        ("POST", "/v1/jobs/job-1:frobnicate", 404),
        ("POST", "/v1/jobs/job-1", 405),
        ("DELETE", "/v1/jobs/job-1", 405),
        ("GET", "/v1/jobs", 405),
        ("PUT", "/v1/openapi.json", 405),
        ("GET", "/", 404),
        ("GET", "/v2/jobs", 404),
        ("GET", "/v1/jobs/a/b", 404),
        ("GET", "/v1/jobs/__x__", 400),
        ("GET", "/v1/jobs/" + "x" * 2000, 400),
        ("GET", "/v1/jobs/%20x", 400),
    ],
)
def test_unknown_paths_methods_and_jobs_answer_in_the_error_format(
    api: Api, method: str, path: str, status: int
) -> None:
    error = error_of(api.request(method, path), status)
    assert error["status"] in {"NOT_FOUND", "INVALID_ARGUMENT", "PERMISSION_DENIED"}


def test_the_request_id_is_echoed_and_a_bad_one_replaced(api: Api) -> None:
    response = api.get("/v1/jobs/nosuch", headers={"X-Request-Id": "req-42"})
    assert response.headers["X-Request-Id"] == "req-42"
    replaced = api.get("/v1/jobs/nosuch", headers={"X-Request-Id": "a b\t"})
    assert replaced.headers["X-Request-Id"] not in {"", "a b\t"}


def test_every_answer_is_logged_once_with_its_request_id(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="services.api.app")
    api.get("/v1/jobs/nosuch", headers={"X-Request-Id": "req-7"})
    lines = [r for r in caplog.records if r.name == "services.api.app"]
    assert len(lines) == 1
    fields = lines[0].fields  # type: ignore[attr-defined]
    assert (fields["status"], fields["operation"], fields["job_id"]) == (403, "get", "nosuch")
    assert fields["caller"] == CALLER
