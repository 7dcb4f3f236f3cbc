"""One duration grammar: a service's Settings, `jobsctl` and the stack's configuration give the
same verdict and the same value for the same string (services/jobs/durations.py).

Each string goes down each component's real path: the scan's `ScanSettings.from_env`
(JOBS_SCAN_RUN_RETENTION_S), `jobsctl plan --interval` (its JSON report), and the stack's
`parse_config` (retryLaterDelayS). The valid strings lie inside all three ranges and are whole
seconds (the stack's keys take whole seconds), so the grammar alone decides the verdict.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.config import parse_config
from infra.errors import InfraConfigError
from services.cli.app import main
from services.cli.errors import ExitCode
from services.edge.settings import SettingsError
from services.scan.settings import ScanSettings
from tests.infra.test_local_scheduler_agreement import MINIMAL as MINIMAL_STACK

SCAN_ENV = {
    "JOBS_PROJECT": "p1",
    "JOBS_TOPIC": "jobs",
    "JOBS_SCAN_AUDIENCE": "https://scan-abc.a.run.app",
    "JOBS_SCAN_ALLOWED_INVOKERS": "scheduler@p1.iam.gserviceaccount.com",
}
SERVICE_KEY = "JOBS_SCAN_RUN_RETENTION_S"
CLI_FLAG = "--interval"
STACK_KEY = "retryLaterDelayS"

VALID = [
    ("90", 90),
    ("90s", 90),
    ("1.5m", 90),
    ("1m30s", 90),
    ("1h30m", 5400),
    ("1H30M", 5400),
    (" 10m ", 600),
    ("120000ms", 120),
    ("1d12h", 129_600),
    ("2w", 1_209_600),
    ("1y", 31_536_000),
]
INVALID = [
    "90 s",
    "1h 30m",
    "30m1h",
    "1m1m",
    "-5m",
    "+5m",
    "1e3",
    "inf",
    "nan",
    "5x",
    "h",
    "1.s",
    ".5m",
    "5 fortnights",
]


def _service(text: str) -> float | str:
    try:
        return ScanSettings.from_env({**SCAN_ENV, SERVICE_KEY: text}).run_retention_s
    except SettingsError as exc:
        return str(exc)


def _jobsctl(text: str, capsys: pytest.CaptureFixture[str]) -> float | str:
    argv = ["plan", "--due", "100", "--rate", "1", "--max-per-run", "10", "--json"]
    code = main([*argv, f"{CLI_FLAG}={text}"])  # = keeps argparse from reading -5m as a flag
    out, err = capsys.readouterr()
    if code == ExitCode.OK:
        report: dict[str, Any] = json.loads(out)
        return float(report["interval_s"])
    assert code == ExitCode.USAGE, err
    return err


def _stack(text: str) -> float | str:
    try:
        return float(parse_config({**MINIMAL_STACK, STACK_KEY: text}).retry_later_delay_s)
    except InfraConfigError as exc:
        return str(exc)


@pytest.mark.parametrize(("text", "seconds"), VALID)
def test_a_valid_duration_means_the_same_to_a_service_jobsctl_and_the_stack(
    text: str, seconds: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (_service(text), _jobsctl(text, capsys), _stack(text)) == (seconds,) * 3


@pytest.mark.parametrize("text", INVALID)
def test_an_invalid_duration_is_refused_by_all_three_naming_the_field(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    service, cli, stack = _service(text), _jobsctl(text, capsys), _stack(text)
    assert f"{SERVICE_KEY}: {text.strip()!r} is not a duration" in str(service)
    assert f"{CLI_FLAG}: {text!r} is not a duration" in str(cli)
    assert f"{STACK_KEY}: {text!r} is not a duration" in str(stack)


def test_the_stack_refuses_a_fraction_of_a_second_that_the_services_accept() -> None:
    # Not a grammar difference: the Google fields the stack's keys set take whole seconds.
    assert "is not a whole number of seconds" in str(_stack("90500ms"))
    assert _service("90500ms") == 90.5
