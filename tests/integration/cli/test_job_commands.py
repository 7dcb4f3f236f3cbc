"""schedule, cancel, reschedule, show and list against the Firestore emulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from services.cli.errors import ExitCode
from services.jobs.ids import derive_job_id
from services.store.job_store import FirestoreJobStore
from tests.integration.cli.conftest import Jobsctl


def test_schedule_creates_a_deferred_job_and_repeating_it_changes_nothing(
    jobsctl: Jobsctl, store: FirestoreJobStore
) -> None:
    due = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    param = 'objects=["m1/a.mp4"]'
    argv = ("schedule", "--job-id", "j1", "--subject", "m1", "--due", due, "--param", param)
    first = jobsctl(*argv, "--json")
    again = jobsctl(*argv)
    assert first.code == again.code == ExitCode.OK
    assert first.json()["created"] is True
    assert "already scheduled (unchanged): j1" in again.out
    job = store.get("j1")
    assert job is not None and job.state == "deferred"
    assert dict(job.params) == {"objects": ["m1/a.mp4"]}
    assert timedelta(days=29) < job.due_at - datetime.now(UTC) <= timedelta(days=30)


def test_schedule_with_other_content_under_the_same_id_is_refused(
    jobsctl: Jobsctl, seed: Callable[..., str]
) -> None:
    seed("j1", subject="m1")
    result = jobsctl(
        "schedule", "--job-id", "j1", "--subject", "other", "--param", "object=m1/source.mp4"
    )
    assert result.code == ExitCode.REFUSED
    assert "already exists with a different subject" in result.err


def test_schedule_derives_the_job_id_from_the_decision(jobsctl: Jobsctl) -> None:
    result = jobsctl(
        "schedule", "--decision", "d-7", "--subject", "m1", "--param", "object=o", "--json"
    )
    assert result.code == ExitCode.OK
    assert result.json()["job"]["job_id"] == derive_job_id("media.delete_source", "m1", "d-7")


def test_schedule_refuses_invalid_input_with_a_usage_exit_code(jobsctl: Jobsctl) -> None:
    unknown = jobsctl("schedule", "--job-id", "j", "--subject", "m", "--action", "nuke")
    bad_time = jobsctl("schedule", "--job-id", "j", "--subject", "m", "--due", "tomorrow")
    bad_param = jobsctl("schedule", "--job-id", "j", "--subject", "m", "--param", "novalue")
    no_id = jobsctl("schedule", "--subject", "m")
    assert unknown.code == bad_time.code == bad_param.code == no_id.code == ExitCode.USAGE
    assert "unknown action 'nuke'" in unknown.err
    assert "'tomorrow' is not a time" in bad_time.err
    assert "is not KEY=VALUE" in bad_param.err


def test_cancel_moves_a_deferred_job_to_cancelled_once(
    jobsctl: Jobsctl, seed: Callable[..., str], store: FirestoreJobStore
) -> None:
    seed("j1", due=timedelta(days=30))
    first = jobsctl("cancel", "j1", "--reason", "decision withdrawn")
    second = jobsctl("cancel", "j1", "--reason", "again", "--json")
    assert first.code == ExitCode.OK and "cancelled: j1" in first.out
    # A repeat whose outcome already holds is a no-op (the rule of every command).
    assert second.code == ExitCode.OK and second.json()["changed"] is False
    job = store.get("j1")
    assert job is not None and job.state == "cancelled"
    assert len(job.history) == 2
    last = job.history[-1]
    assert (last.by, last.reason) == ("operator:alice", "decision withdrawn")


def test_cancel_of_an_unknown_job_is_refused_and_reason_is_required(jobsctl: Jobsctl) -> None:
    missing = jobsctl("cancel", "nope", "--reason", "x")
    no_reason = jobsctl("cancel", "nope")
    assert missing.code == ExitCode.REFUSED and "not found" in missing.err
    assert no_reason.code == ExitCode.USAGE


def test_reschedule_moves_due_at_and_records_why(
    jobsctl: Jobsctl, seed: Callable[..., str], store: FirestoreJobStore
) -> None:
    seed("j1", due=timedelta(days=30))
    result = jobsctl("reschedule", "j1", "--due", "2030-01-02T03:04:05Z", "--reason", "later")
    assert result.code == ExitCode.OK
    job = store.get("j1")
    assert job is not None
    assert job.due_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert job.state == "deferred" and job.history[-1].reason.startswith("later")


def test_reschedule_of_a_cancelled_job_is_refused(
    jobsctl: Jobsctl, seed: Callable[..., str]
) -> None:
    seed("j1")
    jobsctl("cancel", "j1", "--reason", "x")
    result = jobsctl("reschedule", "j1", "--due", "+1d", "--reason", "y")
    assert result.code == ExitCode.REFUSED


def test_show_prints_the_job_with_its_history(jobsctl: Jobsctl, seed: Callable[..., str]) -> None:
    seed("j1", due=timedelta(days=1))
    jobsctl("reschedule", "j1", "--due", "+2d", "--reason", "vendor asked")
    text = jobsctl("show", "j1")
    data = jobsctl("show", "j1", "--json").json()["job"]
    assert text.code == ExitCode.OK
    assert "history:" in text.out and "vendor asked" in text.out
    assert [h["to"] for h in data["history"]] == ["deferred", "deferred"]
    assert jobsctl("show", "nope").code == ExitCode.REFUSED


def test_list_filters_by_state_and_time(jobsctl: Jobsctl, seed: Callable[..., str]) -> None:
    seed("overdue", due=timedelta(hours=-2))
    seed("soon", due=timedelta(hours=1))
    seed("later", due=timedelta(days=30))
    jobsctl("cancel", "later", "--reason", "x")

    def ids(*argv: str) -> list[str]:
        result = jobsctl("list", *argv, "--json")
        assert result.code == ExitCode.OK, result.err
        return [j["job_id"] for j in result.json()["jobs"]]

    assert ids() == ["overdue", "soon", "later"]
    assert ids("--state", "deferred") == ["overdue", "soon"]
    assert ids("--overdue") == ["overdue"]
    assert ids("--due-before", "+2h") == ["overdue", "soon"]
    assert ids("--state", "cancelled") == ["later"]


def test_list_pages_with_a_cursor_and_all_follows_every_page(
    jobsctl: Jobsctl, seed: Callable[..., str]
) -> None:
    for n in range(5):
        seed(f"j{n}", due=timedelta(minutes=n))
    first = jobsctl("list", "--limit", "2", "--json").json()
    second = jobsctl("list", "--limit", "2", "--cursor", first["next_cursor"], "--json").json()
    everything = jobsctl("list", "--limit", "2", "--all")
    assert [j["job_id"] for j in first["jobs"] + second["jobs"]] == ["j0", "j1", "j2", "j3"]
    assert everything.code == ExitCode.OK
    assert "(5 jobs)" in everything.out
    assert "listing jobs: 5" in everything.err  # the progress line goes to stderr
    text_page = jobsctl("list", "--limit", "2")
    assert "--cursor" in text_page.out


def test_list_refuses_filters_no_index_serves(jobsctl: Jobsctl) -> None:
    both = jobsctl("list", "--overdue", "--due-before", "now")
    wrong_state = jobsctl("list", "--overdue", "--state", "enqueued")
    bad_cursor = jobsctl("list", "--cursor", "garbage")
    assert both.code == wrong_state.code == bad_cursor.code == ExitCode.USAGE
    assert "deferred" in wrong_state.err


def test_json_errors_are_json_on_stderr_and_stdout_stays_empty(jobsctl: Jobsctl) -> None:
    result = jobsctl("show", "nope", "--json")
    usage = jobsctl("list", "--state", "bogus", "--json")
    assert result.code == ExitCode.REFUSED and result.out == ""
    assert json.loads(result.err) == {"error": "job 'nope' not found", "exit_code": 1}
    assert usage.code == ExitCode.USAGE and usage.out == ""
    assert json.loads(usage.err)["exit_code"] == 2
    assert "invalid choice: 'bogus'" in json.loads(usage.err)["error"]


def test_cancel_of_a_running_job_records_a_request_for_the_worker(
    jobsctl: Jobsctl, seed: Callable[..., str], store: FirestoreJobStore
) -> None:
    seed("j1", due=timedelta(minutes=-1))
    [claimed] = store.claim_due(datetime.now(UTC), "run-1", 10)
    store.start("j1", claimed.generation, timedelta(minutes=5), "worker-1")
    result = jobsctl("cancel", "j1", "--reason", "stop it", "--json")
    assert result.code == ExitCode.OK
    job = store.get("j1")
    assert job is not None and job.state == "running"
    assert job.cancel_requested is not None and job.cancel_requested.reason == "stop it"
    again = jobsctl("cancel", "j1", "--reason", "again").out
    # Issue 24 finding 9: the worker learns of it at its next heartbeat (lease / 3), not at
    # its next check between units of work.
    assert "cancel requested" in again and "next heartbeat" in again


def test_reschedule_of_an_unknown_job_is_refused_and_a_bad_time_is_usage(
    jobsctl: Jobsctl, seed: Callable[..., str]
) -> None:
    seed("j1", due=timedelta(days=1))
    assert jobsctl("reschedule", "nope", "--due", "+1d", "--reason", "x").code == ExitCode.REFUSED
    bad = jobsctl("reschedule", "j1", "--due", "next week", "--reason", "x")
    assert bad.code == ExitCode.USAGE


def test_a_cancelled_job_expires_after_the_configured_terminal_retention(
    jobsctl: Jobsctl,
    seed: Callable[..., str],
    store: FirestoreJobStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from services.edge.settings import TERMINAL_RETENTION_S

    seed("short", due=timedelta(days=1))
    monkeypatch.setenv(TERMINAL_RETENTION_S, "2d")
    before = datetime.now(UTC)
    assert jobsctl("cancel", "short", "--reason", "test").code == ExitCode.OK
    job = store.get("short")
    assert job is not None and job.expire_at is not None
    assert before + timedelta(days=2) <= job.expire_at <= datetime.now(UTC) + timedelta(days=2)


def test_an_invalid_terminal_retention_is_a_usage_error(
    jobsctl: Jobsctl, seed: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.edge.settings import TERMINAL_RETENTION_S

    seed("j", due=timedelta(days=1))
    monkeypatch.setenv(TERMINAL_RETENTION_S, "-1")
    result = jobsctl("cancel", "j", "--reason", "x")
    assert result.code == ExitCode.USAGE
    assert TERMINAL_RETENTION_S in result.err


@pytest.mark.parametrize("job_id", ["", "a/b", "__x__", ".."])
@pytest.mark.parametrize(
    "command",
    [("show",), ("cancel", "--reason", "r"), ("reschedule", "--due", "+1d", "--reason", "r")],
)
def test_a_job_id_firestore_cannot_hold_is_a_one_line_usage_error(
    jobsctl: Jobsctl, job_id: str, command: tuple[str, ...]
) -> None:
    result = jobsctl(command[0], job_id, *command[1:])
    assert result.code == ExitCode.USAGE
    assert result.err.startswith("jobsctl: job ID") and result.err.count("\n") == 1


def test_schedule_refuses_an_empty_job_id_or_decision(jobsctl: Jobsctl) -> None:
    for flag in ("--job-id", "--decision"):
        result = jobsctl("schedule", flag, "", "--subject", "m1")
        assert result.code == ExitCode.USAGE, flag
        assert "must be a non-empty string" in result.err, flag


def test_a_time_in_the_past_can_follow_its_flag_as_the_runbook_writes_it(
    jobsctl: Jobsctl, store: FirestoreJobStore
) -> None:
    # `-10m` starts with '-', so argparse alone takes it for an option and exits 2.
    assert jobsctl("list", "--claimed-before", "-10m").code == ExitCode.OK
    assert jobsctl("list", "--due-before", "-1h", "--state", "deferred").code == ExitCode.OK
    scheduled = jobsctl(
        "schedule", "--job-id", "j-past", "--subject", "m1", "--due", "-5m", "--param", "object=o"
    )
    assert scheduled.code == ExitCode.OK, scheduled.err
    moved = jobsctl("reschedule", "j-past", "--due", "-2h", "--reason", "r")
    assert moved.code == ExitCode.OK, moved.err
    job = store.get("j-past")
    assert job is not None and job.due_at < datetime.now(UTC) - timedelta(hours=1)


def test_params_at_firestores_nesting_limit_are_stored_and_deeper_ones_are_usage(
    jobsctl: Jobsctl,
) -> None:
    def nested(levels: int) -> str:
        return "top=" + '{"k": ' * levels + "1" + "}" * levels

    # Firestore's limit comes first; within it, the action's schema names the stray field.
    ok_depth = jobsctl("schedule", "--job-id", "deep-ok", "--subject", "m1", "--param", nested(19))
    assert ok_depth.code == ExitCode.USAGE, ok_depth.err
    assert "params.top is not a field of media.delete_source" in ok_depth.err
    refused = jobsctl("schedule", "--job-id", "deep-no", "--subject", "m1", "--param", nested(20))
    assert refused.code == ExitCode.USAGE, refused.err
    assert "nested deeper than" in refused.err
