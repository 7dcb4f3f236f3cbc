"""The JSON log line Cloud Logging reads: keys, trace correlation, bound fields, exceptions."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from services.telemetry.log import (
    SPAN_KEY,
    TRACE_KEY,
    JsonFormatter,
    TraceContext,
    bind_request,
    bound,
    bound_fields,
    configure_logging,
    parse_trace_header,
    request_trace,
)

TRACE_ID = "105445aa7843bc8bf206b12000100000"


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A private logger writing through JsonFormatter into a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.log.capture")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_line_with_cloud_logging_keys(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    logger.info("hello %s", "world")
    logger.warning("careful")
    first, second = lines(stream)
    assert first["message"] == "hello world"
    assert first["severity"] == "INFO"
    assert first["logger"] == "tests.log.capture"
    assert second["severity"] == "WARNING"
    parsed = datetime.datetime.fromisoformat(first["time"])
    assert parsed.utcoffset() == datetime.timedelta(0)
    assert first["time"].endswith("Z")
    assert first["logging.googleapis.com/sourceLocation"]["function"] == (
        "test_each_record_is_one_json_line_with_cloud_logging_keys"
    )


@pytest.mark.parametrize(
    ("level", "severity"),
    [
        (logging.DEBUG, "DEBUG"),
        (logging.INFO, "INFO"),
        (logging.WARNING, "WARNING"),
        (logging.ERROR, "ERROR"),
        (logging.CRITICAL, "CRITICAL"),
        (25, "DEFAULT"),
    ],
)
def test_levels_map_to_cloud_logging_severities(
    capture: tuple[logging.Logger, io.StringIO], level: int, severity: str
) -> None:
    logger, stream = capture
    logger.log(level, "x")
    assert lines(stream)[0]["severity"] == severity


def test_fields_passed_with_extra_become_top_level_keys(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    due = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    logger.info(
        "done",
        extra={"fields": {"job_id": "j1", "outcome": "completed", "due_to_done_s": 1.5, "at": due}},
    )
    (line,) = lines(stream)
    assert line["job_id"] == "j1"
    assert line["outcome"] == "completed"
    assert line["due_to_done_s"] == 1.5
    assert line["at"] == "2026-01-02T03:04:05+00:00"


def test_fields_cannot_overwrite_the_formatter_keys(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    logger.error("real", extra={"fields": {"severity": "DEBUG", "message": "fake"}})
    (line,) = lines(stream)
    assert (line["severity"], line["message"]) == ("ERROR", "real")
    assert (line["field.severity"], line["field.message"]) == ("DEBUG", "fake")


def test_exception_traceback_is_in_the_message(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("failed", extra={"fields": {"job_id": "j2"}})
    (line,) = lines(stream)
    assert line["severity"] == "ERROR"
    assert line["message"].startswith("failed\nTraceback (most recent call last):")
    assert "RuntimeError: boom" in line["message"]
    assert line["job_id"] == "j2"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"{TRACE_ID}/1;o=1", TraceContext(TRACE_ID, "1", True)),
        (f"{TRACE_ID}/123456789;o=0", TraceContext(TRACE_ID, "123456789", False)),
        (f"{TRACE_ID}/42", TraceContext(TRACE_ID, "42", None)),
        (TRACE_ID, TraceContext(TRACE_ID, None, None)),
        (TRACE_ID.upper(), TraceContext(TRACE_ID, None, None)),
        (None, None),
        ("", None),
        ("not-a-trace/1;o=1", None),
        (f"{TRACE_ID}/abc;o=1", None),
        (f"{TRACE_ID}x/1", None),
    ],
)
def test_trace_header_parsing(header: str | None, expected: TraceContext | None) -> None:
    assert parse_trace_header(header) == expected


def test_bound_request_puts_trace_span_and_fields_on_every_line(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    with bind_request(f"{TRACE_ID}/7;o=1", "my-project", run_id="r1"):
        logger.info("one")
        logger.info("two", extra={"fields": {"action": "claim"}})
    logger.info("after")
    one, two, after = lines(stream)
    for line in (one, two):
        assert line[TRACE_KEY] == f"projects/my-project/traces/{TRACE_ID}"
        assert line[SPAN_KEY] == "7"
        assert line["logging.googleapis.com/trace_sampled"] is True
        assert line["run_id"] == "r1"
    assert two["action"] == "claim"
    assert TRACE_KEY not in after
    assert "run_id" not in after


def test_malformed_trace_header_binds_only_the_fields(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    with bind_request("garbage", "p", run_id="r2"):
        logger.info("x")
    (line,) = lines(stream)
    assert TRACE_KEY not in line
    assert line["run_id"] == "r2"


def test_nested_bindings_merge_and_unwind() -> None:
    with bound(run_id="r1", action="scan"):
        with bound(action="publish", job_id="j"):
            assert bound_fields() == {"run_id": "r1", "action": "publish", "job_id": "j"}
        assert bound_fields() == {"run_id": "r1", "action": "scan"}
    assert bound_fields() == {}


def test_per_call_fields_win_over_bound_fields(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    with bound(outcome="pending"):
        logger.info("x", extra={"fields": {"outcome": "completed"}})
    assert lines(stream)[0]["outcome"] == "completed"


def test_concurrent_tasks_keep_their_own_bindings(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture

    async def handle(run_id: str) -> None:
        with bound(run_id=run_id):
            await asyncio.sleep(0)
            logger.info(run_id)

    async def main() -> None:
        await asyncio.gather(*(handle(f"r{i}") for i in range(5)))

    # A private loop, not asyncio.run(): that clears the main thread's current loop, which
    # Pulumi's mock runtime (tests/infra) relies on later in the same session.
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert all(line["run_id"] == line["message"] for line in lines(stream))
    assert len(lines(stream)) == 5


def test_configure_logging_installs_one_json_handler_on_root() -> None:
    root = logging.getLogger()
    before_handlers, before_level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        configure_logging("debug", stream=stream)
        configure_logging("WARNING", stream=stream)
        logging.getLogger("tests.log.root").warning("once", extra={"fields": {"k": 1}})
        logging.getLogger("tests.log.root").info("filtered out")
    finally:
        for handler in root.handlers:
            if handler not in before_handlers:
                root.removeHandler(handler)
        root.setLevel(before_level)
    (line,) = lines(stream)
    assert (line["message"], line["k"], line["severity"]) == ("once", 1, "WARNING")


def test_configure_logging_rejects_an_unknown_level() -> None:
    with pytest.raises(ValueError, match="LOUD"):
        configure_logging("LOUD")


def test_trace_without_project_is_the_bare_trace_id() -> None:
    assert TraceContext(TRACE_ID).fields(None) == {TRACE_KEY: TRACE_ID}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # traceparent first (https://cloud.google.com/trace/docs/trace-context) ...
        (
            {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01", "X-Cloud-Trace-Context": "x"},
            TraceContext(TRACE_ID, "00f067aa0ba902b7", True),
        ),
        (
            {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-00"},
            TraceContext(TRACE_ID, "00f067aa0ba902b7", False),
        ),
        # ... the older header when traceparent is absent or malformed ...
        ({"X-Cloud-Trace-Context": f"{TRACE_ID}/7;o=1"}, TraceContext(TRACE_ID, "7", True)),
        (
            {
                "traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01",
                "X-Cloud-Trace-Context": f"{TRACE_ID}/7",
            },
            TraceContext(TRACE_ID, "7", None),
        ),
        ({"traceparent": f"01-{TRACE_ID}-00f067aa0ba902b7-01"}, None),
        ({"traceparent": f"00-{TRACE_ID}-{'0' * 16}-01"}, None),
        ({}, None),
    ],
)
def test_a_requests_trace_is_read_from_traceparent_then_x_cloud_trace_context(
    headers: dict[str, str], expected: TraceContext | None
) -> None:
    assert request_trace(headers) == expected


def test_bind_request_takes_a_trace_read_from_traceparent(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    with bind_request(request_trace({"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}), "p"):
        logger.info("x")
    (line,) = lines(stream)
    assert line[TRACE_KEY] == f"projects/p/traces/{TRACE_ID}"
    assert line[SPAN_KEY] == "00f067aa0ba902b7"
