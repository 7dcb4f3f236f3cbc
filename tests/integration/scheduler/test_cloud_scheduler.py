"""The local Cloud Scheduler against a real HTTP target on 127.0.0.1, rule by rule.

Time is a ManualClock (TEST SETTING): each test moves it by hand and `settle()`s, so minute-long
rules are checked exactly, with no sleeping; only the HTTP exchanges are real.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import google.auth.transport.requests
import pytest
from google.oauth2 import id_token

from emulators.scheduler.attempt import token_from_issuer_url
from emulators.scheduler.clock import ManualClock
from emulators.scheduler.job import HttpJob
from emulators.scheduler.retry import RetryConfig
from emulators.scheduler.scheduler import Attempt, CloudScheduler, ForcedScheduleTime
from services.edge.scheduler_request import (
    JOB_NAME_HEADER,
    SCHEDULE_TIME_HEADER,
    parse_schedule_time,
)

INVOKER = "deferred-jobs-scheduler@p.iam.gserviceaccount.com"
JOB = "projects/p/locations/europe-west1/jobs/deferred-jobs-scan"
START = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)  # half a minute past 12:00
WAIT_S = 10.0  # real seconds a test waits for an HTTP exchange that must happen


@dataclass
class Seen:
    """One request the target received: the (manual) time it arrived and its headers."""

    at: datetime
    headers: dict[str, str]


@dataclass
class Target:
    """An HTTP endpoint that records requests; it answers `statuses` in turn (then 200), and
    holds each answer while `hold` is clear."""

    clock: ManualClock
    statuses: list[int] = field(default_factory=list)
    hold: threading.Event = field(default_factory=threading.Event)
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    arrived: threading.Condition = field(default_factory=threading.Condition)
    url: str = ""

    def __post_init__(self) -> None:
        self.hold.set()

    def wait_for(self, count: int) -> None:
        with self.arrived:
            ok = self.arrived.wait_for(lambda: len(self.seen) >= count, timeout=WAIT_S)
        assert ok, f"{len(self.seen)} requests arrived, expected {count}"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def target(clock: ManualClock) -> Iterator[Target]:
    endpoint = Target(clock)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with endpoint.arrived:
                endpoint.seen.append(Seen(endpoint.clock.now(), dict(self.headers.items())))
                status = endpoint.statuses.pop(0) if endpoint.statuses else 200
                endpoint.in_flight += 1
                endpoint.most_in_flight = max(endpoint.most_in_flight, endpoint.in_flight)
                endpoint.arrived.notify_all()
            endpoint.hold.wait(timeout=30)
            body = b'{"claimed": 2}'
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the scheduler cancelled this attempt and closed the connection
            finally:
                with endpoint.arrived:
                    endpoint.in_flight -= 1

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        yield endpoint
    finally:
        endpoint.hold.set()
        server.shutdown()
        server.server_close()


def _job(target: Target, **overrides: Any) -> HttpJob:
    settings: dict[str, Any] = {
        "name": JOB,
        "uri": target.url,
        "oidc_service_account_email": INVOKER,
        "schedule": "* * * * *",
    }
    return HttpJob(**{**settings, **overrides})


@pytest.fixture
def running() -> Iterator[list[CloudScheduler]]:
    """The schedulers a test started (`_start`); every one is stopped at the end."""
    started: list[CloudScheduler] = []
    yield started
    for scheduler in started:
        scheduler.stop()


def _start(
    started: list[CloudScheduler],
    job: HttpJob,
    clock: ManualClock,
    token_url: str,
    **options: Any,
) -> CloudScheduler:
    scheduler = CloudScheduler(job, token_from_issuer_url(token_url), clock=clock, **options)
    started.append(scheduler.start())
    clock.settle()
    return scheduler


def _wait_attempts(scheduler: CloudScheduler, count: int, clock: ManualClock) -> None:
    """Wait (real time) until the scheduler has recorded `count` ended attempts and sleeps."""
    deadline = time.monotonic() + WAIT_S
    while len(scheduler.attempts) < count:
        assert time.monotonic() < deadline, f"{len(scheduler.attempts)} attempts, not {count}"
        time.sleep(0.02)
    clock.settle()


def _advance_to(clock: ManualClock, when: datetime) -> None:
    clock.set(when)
    clock.settle()


def _at(hour: int, minute: int, second: int = 0) -> datetime:
    return START.replace(hour=hour, minute=minute, second=second)


def test_it_fires_at_each_cron_minute_and_not_before(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    scheduler = _start(running, _job(target, schedule="*/5 * * * *"), clock, oidc_server.token_url)
    _advance_to(clock, _at(12, 4, 59))
    assert target.seen == []
    _advance_to(clock, _at(12, 5))
    target.wait_for(1)
    _advance_to(clock, _at(12, 9, 59))
    assert len(target.seen) == 1
    _advance_to(clock, _at(12, 10))
    target.wait_for(2)
    times = [parse_schedule_time(s.headers[SCHEDULE_TIME_HEADER]) for s in target.seen]
    assert times == [_at(12, 5), _at(12, 10)]
    assert [s.at for s in target.seen] == [_at(12, 5), _at(12, 10)]
    assert scheduler.next_scheduled == _at(12, 15)


def test_each_request_carries_the_job_headers_and_a_token_for_the_audience_and_account(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    _start(running, _job(target), clock, oidc_server.token_url)
    _advance_to(clock, _at(12, 1))
    target.wait_for(1)
    headers = target.seen[0].headers
    assert headers[JOB_NAME_HEADER] == "deferred-jobs-scan"
    assert headers[SCHEDULE_TIME_HEADER] == "2026-03-02T12:01:00Z"
    assert headers["X-CloudScheduler"] == "true"
    assert headers["User-Agent"] == "Google-Cloud-Scheduler"
    claims = id_token.verify_token(
        headers["Authorization"].removeprefix("Bearer "),
        google.auth.transport.requests.Request(),
        audience=target.url,
        certs_url=oidc_server.certs_url,
    )
    assert claims["email"] == INVOKER and claims["email_verified"] is True


def test_the_schedule_time_is_written_with_the_job_time_zone_offset(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    job = _job(target, schedule="0 13 * * *", time_zone="Europe/Berlin")  # 12:00 UTC in March
    _start(running, job, clock, oidc_server.token_url)
    _advance_to(clock, START + timedelta(days=1))
    target.wait_for(1)
    value = target.seen[0].headers[SCHEDULE_TIME_HEADER]
    assert value == "2026-03-03T13:00:00+01:00"
    assert parse_schedule_time(value) == datetime(2026, 3, 3, 12, 0, tzinfo=UTC)


def test_a_late_execution_delays_the_next_to_its_end_and_skips_the_times_in_between(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    scheduler = _start(running, _job(target), clock, oidc_server.token_url)
    target.hold.clear()
    _advance_to(clock, _at(12, 1))
    target.wait_for(1)
    # 12:02 and 12:03 pass while the 12:01 execution is outstanding: nothing else starts.
    _advance_to(clock, _at(12, 3, 30))
    assert len(target.seen) == 1 and target.most_in_flight == 1
    target.hold.set()  # the 12:01 execution ends now, at 12:03:30
    target.wait_for(2)
    second = target.seen[1]
    assert second.at == _at(12, 3, 30)  # started when the first ended, not at 12:04
    assert second.headers[SCHEDULE_TIME_HEADER] == "2026-03-02T12:02:00Z"
    clock.settle()
    assert scheduler.skipped == [_at(12, 3)]
    assert scheduler.next_scheduled == _at(12, 4)
    assert target.most_in_flight == 1


def test_an_attempt_past_its_deadline_is_retried_while_the_first_still_runs(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    ended: list[Attempt] = []
    job = _job(
        target,
        attempt_deadline_s=15,
        retry=RetryConfig(retry_count=1, min_backoff_s=5, max_backoff_s=5),
    )
    _start(running, job, clock, oidc_server.token_url, on_attempt=ended.append)
    target.hold.clear()  # the target takes longer than any deadline
    _advance_to(clock, _at(12, 1))
    target.wait_for(1)
    _advance_to(clock, _at(12, 1, 14))
    assert ended == []
    _advance_to(clock, _at(12, 1, 15))  # the deadline: the attempt failed, the target runs on
    assert [(a.deadline_exceeded, a.status, a.retry) for a in ended] == [(True, None, 0)]
    _advance_to(clock, _at(12, 1, 20))  # + minBackoffDuration: the retry
    target.wait_for(2)
    first, retry = target.seen
    assert retry.at == _at(12, 1, 20)
    assert retry.headers[SCHEDULE_TIME_HEADER] == first.headers[SCHEDULE_TIME_HEADER]
    assert target.most_in_flight == 2  # the first attempt's handler was still running
    target.hold.set()
    _wait_attempts(running[0], 2, clock)
    assert [a.retry for a in ended] == [0, 1] and ended[1].succeeded


def test_retries_follow_the_documented_backoff_and_stop_after_retry_count(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    # RetryConfig's own example: min 10 s, max 300 s, 3 doublings -> 10, 20, 40, 80, 160 ...
    target.statuses = [500] * 10
    job = _job(
        target,
        schedule="0 * * * *",
        retry=RetryConfig(retry_count=5, min_backoff_s=10, max_backoff_s=300, max_doublings=3),
    )
    scheduler = _start(running, job, clock, oidc_server.token_url)
    fire = _at(13, 0)
    _advance_to(clock, fire)
    target.wait_for(1)
    expected = [0.0]
    for wait_s in (10, 20, 40, 80, 160):
        _wait_attempts(scheduler, len(expected), clock)  # the failure is in before time moves
        expected.append(expected[-1] + wait_s)
        _advance_to(clock, fire + timedelta(seconds=expected[-1] - 1))
        assert len(target.seen) == len(expected) - 1  # not a second early
        _advance_to(clock, fire + timedelta(seconds=expected[-1]))
        target.wait_for(len(expected))
    _wait_attempts(scheduler, 6, clock)
    _advance_to(clock, _at(13, 59, 59))
    assert [(s.at - fire).total_seconds() for s in target.seen] == expected  # 6 = 1 + 5 retries
    assert {s.headers[SCHEDULE_TIME_HEADER] for s in target.seen} == {"2026-03-02T13:00:00Z"}
    assert [a.retry for a in scheduler.attempts] == [0, 1, 2, 3, 4, 5]


def test_with_retry_count_0_a_failed_attempt_waits_for_the_next_scheduled_time(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    target.statuses = [503]
    scheduler = _start(running, _job(target), clock, oidc_server.token_url)
    _advance_to(clock, _at(12, 1))
    _wait_attempts(scheduler, 1, clock)
    _advance_to(clock, _at(12, 1, 59))
    assert len(target.seen) == 1
    _advance_to(clock, _at(12, 2))
    _wait_attempts(scheduler, 2, clock)
    assert [a.status for a in scheduler.attempts] == [503, 200]
    assert [a.retry for a in scheduler.attempts] == [0, 0]


def test_max_retry_duration_keeps_retrying_until_it_has_passed(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    target.statuses = [500] * 10
    retry = RetryConfig(retry_count=0, min_backoff_s=10, max_backoff_s=60, max_retry_duration_s=25)
    job = _job(target, schedule="0 * * * *", retry=retry)
    scheduler = _start(running, job, clock, oidc_server.token_url)
    fire = _at(13, 0)
    _advance_to(clock, fire)
    for count, offset in ((1, 10), (2, 30)):  # failures at 0 s, 10 s: inside 25 s, retried
        _wait_attempts(scheduler, count, clock)
        _advance_to(clock, fire + timedelta(seconds=offset))
        target.wait_for(count + 1)
    _wait_attempts(scheduler, 3, clock)
    _advance_to(clock, _at(13, 59))  # the failure at 30 s is past 25 s: no more
    assert [(s.at - fire).total_seconds() for s in target.seen] == [0, 10, 30]


def test_a_forced_run_is_dispatched_at_once_even_while_an_execution_is_outstanding(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    scheduler = _start(running, _job(target), clock, oidc_server.token_url)
    target.hold.clear()
    _advance_to(clock, _at(12, 1))
    target.wait_for(1)
    carried = scheduler.run_now()  # like `gcloud scheduler jobs run`
    target.wait_for(2)
    assert target.most_in_flight == 2
    assert carried == _at(12, 2)  # the next scheduled execution's time (ForcedScheduleTime.NEXT)
    assert target.seen[1].headers[SCHEDULE_TIME_HEADER] == "2026-03-02T12:02:00Z"
    assert target.seen[1].at == _at(12, 1)
    target.hold.set()


def test_a_forced_run_may_carry_no_schedule_time(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    scheduler = _start(
        running,
        _job(target),
        clock,
        oidc_server.token_url,
        forced_schedule_time=ForcedScheduleTime.OMITTED,
    )
    assert scheduler.run_now() is None
    target.wait_for(1)
    assert SCHEDULE_TIME_HEADER not in target.seen[0].headers
    assert target.seen[0].headers[JOB_NAME_HEADER] == "deferred-jobs-scan"
    _wait_attempts(scheduler, 1, clock)
    assert [(a.forced, a.schedule_time) for a in scheduler.attempts] == [(True, None)]


def test_an_issuer_that_gives_no_token_is_a_failed_attempt_and_nothing_is_sent(
    clock: ManualClock, target: Target, running: list[CloudScheduler]
) -> None:
    scheduler = _start(running, _job(target), clock, "http://127.0.0.1:9/token")
    _advance_to(clock, _at(12, 1))
    _wait_attempts(scheduler, 1, clock)
    [attempt] = scheduler.attempts
    assert attempt.status is None and "no token from" in attempt.error
    assert target.seen == []


def test_a_test_cadence_fires_every_given_seconds(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    # TEST SETTING, not Cloud Scheduler: a 2 s cadence instead of the cron schedule.
    _start(running, _job(target, test_cadence_s=2.0), clock, oidc_server.token_url)
    for count in (1, 2, 3):
        _advance_to(clock, START + timedelta(seconds=2 * count))
        target.wait_for(count)
    assert [s.at for s in target.seen] == [START + timedelta(seconds=2 * n) for n in (1, 2, 3)]


def test_a_drill_retry_carries_what_the_executions_own_attempts_carry(
    clock: ManualClock, target: Target, oidc_server: Any, running: list[CloudScheduler]
) -> None:
    scheduler = _start(running, _job(target), clock, oidc_server.token_url)
    _advance_to(clock, _at(12, 1))
    target.wait_for(1)
    call = scheduler.send_retry_of(_at(12, 1))
    target.wait_for(2)
    deadline = time.monotonic() + WAIT_S
    while call.answer is None:
        assert time.monotonic() < deadline, "the drill retry got no answer"
        time.sleep(0.02)
    first, retry = (s.headers for s in target.seen)
    for header in (JOB_NAME_HEADER, SCHEDULE_TIME_HEADER, "X-CloudScheduler", "User-Agent"):
        assert retry[header] == first[header]
    assert retry["Authorization"].startswith("Bearer ")
    assert call.answer.status == 200
    # Outside the schedule's bookkeeping: the scheduler recorded one attempt, not two.
    _wait_attempts(scheduler, 1, clock)
    assert len(scheduler.attempts) == 1
