"""The HTTP target rules: the configuration, a job's params (no SSRF), the response contract."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.jobs.http_targets import (
    MAX_RETRY_AFTER_S,
    HttpTarget,
    TargetsError,
    judge,
    parse_targets,
    path_problem,
    request_params_problems,
    retry_after_seconds,
)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
TARGETS = {
    "trials": HttpTarget("trials", "https://trials-abc.a.run.app", "https://trials-abc.a.run.app")
}


def test_targets_parse_with_the_audience_defaulting_to_the_urls_origin() -> None:
    targets = parse_targets(
        '{"trials": {"url": "https://trials-abc.a.run.app/base", "rate": 5, "concurrency": 2}}'
    )
    trials = targets["trials"]
    assert trials.audience == "https://trials-abc.a.run.app"
    assert (trials.rate, trials.concurrency, trials.timeout_s) == (5.0, 2, 30.0)
    assert trials.url_for("/internal/trials/7:expire") == (
        "https://trials-abc.a.run.app/base/internal/trials/7:expire"
    )


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{", "JOBS_HTTP_TARGETS: not JSON"),
        ("[]", "expected an object"),
        ('{"Bad_Name": {"url": "https://x.example"}}', "JOBS_HTTP_TARGETS.Bad_Name"),
        ('{"t": {"url": "http://example.com"}}', "JOBS_HTTP_TARGETS.t.url: plain http"),
        ('{"t": {"url": "https://u:p@example.com"}}', "JOBS_HTTP_TARGETS.t.url: user info"),
        ('{"t": {"url": "https://example.com/?a=1"}}', "JOBS_HTTP_TARGETS.t.url: a target URL"),
        ('{"t": {"url": "ftp://example.com"}}', "JOBS_HTTP_TARGETS.t.url: expected an https"),
        ('{"t": {"url": "https://e.com", "rate": 0}}', "JOBS_HTTP_TARGETS.t.rate"),
        ('{"t": {"url": "https://e.com", "concurrency": true}}', "JOBS_HTTP_TARGETS.t.concurrency"),
        ('{"t": {"url": "https://e.com", "timeout_s": 601}}', "JOBS_HTTP_TARGETS.t.timeout_s"),
        ('{"t": {"url": "https://e.com", "urll": 1}}', "unknown field(s) urll"),
    ],
)
def test_a_bad_configuration_names_the_field(text: str, named: str) -> None:
    with pytest.raises(TargetsError) as caught:
        parse_targets(text)
    assert any(named in problem for problem in caught.value.problems), caught.value.problems


def test_plain_http_is_accepted_to_this_machine_only() -> None:
    assert parse_targets('{"local": {"url": "http://127.0.0.1:9000"}}')["local"].url


@pytest.mark.parametrize(
    "path",
    [
        "relative",
        "//evil.example/x",
        "/a/../admin",
        "/a/%2e%2e/admin",
        "/a/%2E%2e/admin",
        "/a/./b",
        "/a/%2F%2Fevil",
        "/a\\b",
        "/a b",
        "/a%0d%0aX-Injected: 1",
        "/a#frag",
        "/a%zz",
        "/" + "x" * 2048,
        None,
        7,
    ],
)
def test_a_path_that_could_leave_the_target_is_refused(path: object) -> None:
    assert path_problem(path) is not None


@pytest.mark.parametrize(
    "path", ["/", "/internal/trials/7:expire", "/v1/items/a%20b?force=true&x=1", "/a@b/~c"]
)
def test_an_ordinary_path_is_accepted(path: str) -> None:
    assert path_problem(path) is None


def test_params_name_every_problem_by_field() -> None:
    problems = request_params_problems(
        {"target": "nope", "path": "//x", "method": "TRACE", "extra": 1}, TARGETS
    )
    joined = " | ".join(problems)
    for field in (
        "params.target",
        "params.path",
        "params.method",
        "params: unknown field(s) extra",
    ):
        assert field in joined
    assert "known: trials" in joined


def test_a_get_carries_no_body() -> None:
    problems = request_params_problems(
        {"target": "trials", "path": "/x", "method": "GET", "body": {}}, TARGETS
    )
    assert problems == ["params.body: a GET request carries no body"]


@pytest.mark.parametrize(
    ("status", "retry_after", "verdict", "delay"),
    [
        (200, None, "done", None),
        (204, None, "done", None),
        (429, "30", "retry_after", 30.0),
        (503, "Sat, 05 Dec 2026 12:01:00 GMT", "retry_after", 60.0),
        (429, None, "transient", None),
        (503, "soon", "transient", None),
        (500, "30", "transient", None),
        (502, None, "transient", None),
        (301, None, "permanent", None),
        (400, None, "permanent", None),
        (404, "30", "permanent", None),
        (409, None, "permanent", None),
    ],
)
def test_the_response_contract(
    status: int, retry_after: str | None, verdict: str, delay: float | None
) -> None:
    answer = judge(status, retry_after, NOW)
    assert (answer.verdict, answer.retry_after_s) == (verdict, delay)


def test_retry_after_is_bounded() -> None:
    assert retry_after_seconds("0", NOW) == 1.0
    assert retry_after_seconds("99999999", NOW) == MAX_RETRY_AFTER_S
    assert retry_after_seconds("Sat, 05 Dec 2026 11:00:00 GMT", NOW) == 1.0
