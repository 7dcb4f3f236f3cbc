"""`schedule --from`'s lines: one job each, or a refusal that says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.cli.jobfile import parse_line, read_lines
from services.jobs.ids import derive_job_id

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_decision_line_derives_its_job_id_and_a_relative_due() -> None:
    line = parse_line(
        7, '{"decision": "d", "subject": "m", "params": {"object": "o"}, "due": "+1y"}', NOW
    )
    assert line.refusal is None and line.job is not None and line.number == 7
    assert line.job.job_id == derive_job_id("media.delete_source", "m", "d")
    assert line.job.due_at == NOW + timedelta(days=365)


def test_each_shape_problem_is_named() -> None:
    cases = {
        "[1]": "not a JSON object",
        "{": "not JSON",
        '{"subject": "m"}': "exactly one of job_id or decision",
        '{"job_id": "j", "decision": "d", "subject": "m"}': "exactly one of job_id or decision",
        '{"job_id": "j"}': "subject is required",
        '{"job_id": 5, "subject": "m"}': "job_id must be a string",
        '{"job_id": "j", "subject": "m", "params": []}': "params must be a JSON object",
        '{"job_id": "j", "subject": "m", "due": "soon"}': "due: 'soon' is not a time",
        '{"job_id": "j", "subject": "m", "when": 1}': "unknown key 'when'",
    }
    for text, reason in cases.items():
        line = parse_line(1, text, NOW)
        assert line.job is None and reason in (line.refusal or ""), text


def test_blank_lines_are_skipped_and_numbers_stay_the_editors() -> None:
    lines = read_lines(["", '{"job_id": "j", "subject": "m"}', "  ", "x"], NOW)
    assert [line.number for line in lines] == [2, 4]
