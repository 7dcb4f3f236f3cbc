from __future__ import annotations

import pytest

from services.scan.trigger import MAX_BODY_BYTES, Trigger, TriggerError, parse_trigger


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", Trigger()),
        (b"  \n", Trigger()),
        (b"{}", Trigger()),
        (b'{"dry_run": true}', Trigger(dry_run=True)),
        (b'{"dry_run": false}', Trigger(dry_run=False)),
    ],
)
def test_empty_or_known_options_are_accepted(body: bytes, expected: Trigger) -> None:
    assert parse_trigger(body) == expected


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[]", "JSON object"),
        (b'"dry_run"', "JSON object"),
        (b"null", "JSON object"),
        (b'{"dry_run": "yes"}', "'dry_run' must be a JSON boolean"),
        (b'{"dry_run": 1}', "'dry_run' must be a JSON boolean"),
        (b'{"limit": 5}', "unknown key 'limit'"),
        (b" " * (MAX_BODY_BYTES + 1), "larger than"),
    ],
)
def test_anything_else_is_refused_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(TriggerError, match=reason):
        parse_trigger(body)


def test_scheduler_headers_name_the_execution() -> None:
    from datetime import UTC, datetime

    from services.edge.scheduler_request import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER

    headers = {JOB_NAME_HEADER: "scan-p0", SCHEDULE_TIME_HEADER: "2026-10-16T05:00:00-07:00"}
    trigger = parse_trigger(b'{"partition": 1}', headers)
    assert trigger.partition == 1
    assert trigger.execution is not None
    # The same instant in another offset is the same execution.
    assert trigger.execution.schedule_time == datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
    same = parse_trigger(b"", {**headers, SCHEDULE_TIME_HEADER: "2026-10-16T12:00:00Z"})
    assert same.execution is not None and same.execution.key == trigger.execution.key
    # Without both headers a request is no scheduled execution (a manual run).
    assert parse_trigger(b"", {JOB_NAME_HEADER: "scan-p0"}).execution is None


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"X-CloudScheduler-JobName": "j", "X-CloudScheduler-ScheduleTime": "yesterday"}, "RFC"),
        (
            {"X-CloudScheduler-JobName": "j", "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00"},
            "RFC",
        ),
        (
            {"X-CloudScheduler-JobName": " ", "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00Z"},
            "JobName",
        ),
    ],
)
def test_malformed_scheduler_headers_are_refused(headers: dict[str, str], reason: str) -> None:
    with pytest.raises(TriggerError, match=reason):
        parse_trigger(b"", headers)


@pytest.mark.parametrize(
    "body", [b'{"partition": -1}', b'{"partition": 64}', b'{"partition": true}']
)
def test_a_partition_out_of_range_is_refused(body: bytes) -> None:
    with pytest.raises(TriggerError, match="partition"):
        parse_trigger(body)
