"""NewJob validation, deterministic IDs, and the document round trip."""

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from services.jobs.errors import ValidationError
from services.jobs.ids import (
    derive_idempotency_key,
    derive_job_id,
    document_id_problems,
    is_valid_job_id,
    job_id_problems,
)
from services.jobs.model import NewJob
from services.jobs.parts import CancelRequest, Claim, ErrorInfo, Result
from services.jobs.record import Job
from services.jobs.state import HistoryEntry, State

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GOOD = NewJob(
    "job-1", "media.delete_source", "media-1", T0, {"bucket": "media-src", "objects": ["a"]}
)

# An action that declares no params schema: only the limits every params map has apply.
OPEN_ACTION = "test.open"
OPEN = replace(GOOD, action=OPEN_ACTION)
BOTH: frozenset[str] = frozenset({"media.delete_source", OPEN_ACTION})


def problems_of(new: NewJob, known: frozenset[str] = frozenset({"media.delete_source"})) -> str:
    with pytest.raises(ValidationError) as caught:
        new.validated(known)
    return str(caught.value)


def test_a_valid_job_is_normalised_to_utc_with_a_derived_idempotency_key() -> None:
    local = datetime(2026, 1, 1, 3, tzinfo=timezone(timedelta(hours=3)))
    valid = replace(GOOD, due_at=local).validated()
    assert valid.due_at == T0
    assert valid.due_at.utcoffset() == timedelta(0)
    assert valid.idempotency_key == derive_idempotency_key("media.delete_source", "job-1")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"action": "media.explode"}, "unknown action 'media.explode'"),
        ({"due_at": datetime(2026, 1, 1)}, "has no timezone"),
        ({"subject": ""}, "subject must be a non-empty string"),
        ({"subject": "   "}, "subject must be a non-empty string"),
        ({"job_id": ""}, "job ID must be a non-empty string"),
        ({"job_id": "a/b"}, "contains '/'"),
        ({"job_id": "."}, "cannot be '.'"),
        ({"job_id": ".."}, "cannot be '..'"),
        ({"job_id": "__secret__"}, "matches __.*__"),
        ({"job_id": "x" * 1501}, "1501 bytes"),
        ({"job_id": "é" * 751}, "1502 bytes"),
        ({"params": {"blob": "x" * 17_000}}, "the limit is 16384"),
        ({"params": {"when": T0}}, "not a JSON value"),
        ({"params": {1: "a"}}, "is not a non-empty string"),
        ({"params": {"n": float("nan")}}, "JSON cannot encode"),
        ({"params": {"n": 2**64}}, "64-bit integer"),
        ({"params": {"grid": [[1]]}}, "nested arrays"),
        ({"params": ["not", "a", "map"]}, "params must be a map"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 100"),
        ({"max_attempts": 101}, "max_attempts must be an integer from 1 to 100"),
        ({"max_attempts": True}, "max_attempts must be an integer"),
        ({"idempotency_key": "a/b"}, "idempotency key 'a/b' contains '/'"),
    ],
)
def test_each_invalid_field_is_refused_with_a_clear_message(
    change: dict[str, object], expected: str
) -> None:
    assert expected in problems_of(replace(GOOD, **change))  # type: ignore[arg-type]


def test_every_problem_is_listed_at_once() -> None:
    error = problems_of(NewJob("a/b", "nope", "", datetime(2026, 1, 1), max_attempts=0))
    for fragment in ("'/'", "unknown action", "subject", "no timezone", "max_attempts"):
        assert fragment in error


def test_the_params_cap_counts_compact_json_bytes() -> None:
    overhead = len('{"k":""}')
    assert replace(OPEN, params={"k": "x" * (16384 - overhead)}).validated(BOTH)
    assert "16385 bytes" in problems_of(replace(OPEN, params={"k": "x" * (16385 - overhead)}), BOTH)


def test_a_job_id_of_exactly_1500_bytes_is_accepted() -> None:
    assert document_id_problems("x" * 1500) == []


def test_derived_job_ids_are_deterministic_readable_and_distinct() -> None:
    first = derive_job_id("media.delete_source", "media/42", "decision-7")
    assert first == derive_job_id("media.delete_source", "media/42", "decision-7")
    assert first.startswith("media.delete_source:media_42:decision-7:")
    assert document_id_problems(first) == []
    assert job_id_problems(first) == []
    # Sanitising maps both to the same readable text; the hash still tells them apart.
    assert derive_job_id("a", "m/1", "d") != derive_job_id("a", "m_1", "d")
    assert derive_job_id("a", "m", "d:e") != derive_job_id("a", "m:d", "e")
    long_id = derive_job_id("a", "s" * 5000, "d" * 5000)
    assert document_id_problems(long_id) == []
    assert document_id_problems(derive_job_id("__x", "y", "z__")) == []
    assert is_valid_job_id(long_id)
    assert is_valid_job_id(derive_job_id("a\tb", " s ", "d\x00"))


@pytest.mark.parametrize(
    ("job_id", "problem"),
    [
        (" lead", "whitespace"),
        ("trail ", "whitespace"),
        ("trail\u00a0", "whitespace"),
        ("tab\there", "control character"),
        ("nul\x00", "control character"),
        ("line\nbreak", "control character"),
        ("del\x7f", "control character"),
        ("c1\x9f", "control character"),
    ],
)
def test_a_job_id_the_worker_could_not_receive_is_refused(job_id: str, problem: str) -> None:
    assert problem in "; ".join(job_id_problems(job_id))
    assert problem in problems_of(replace(GOOD, job_id=job_id))
    assert not is_valid_job_id(job_id)


def test_inner_spaces_and_non_ascii_letters_are_valid_in_a_job_id() -> None:
    assert is_valid_job_id("media 42 décision")


def test_derived_ids_follow_the_documented_cross_language_recipe() -> None:
    # sha256 of JavaScript's JSON.stringify(["media.delete_source","m/1","dé"])
    encoded = '["media.delete_source","m/1","dé"]'.encode()
    digest = hashlib.sha256(encoded).hexdigest()
    assert derive_job_id("media.delete_source", "m/1", "dé") == (
        f"media.delete_source:m_1:d_:{digest[:24]}"
    )
    key_digest = hashlib.sha256(b'["media.delete_source","job-1"]').hexdigest()
    assert derive_idempotency_key("media.delete_source", "job-1") == (
        f"media.delete_source:{key_digest}"
    )


def test_a_full_job_survives_the_document_round_trip() -> None:
    job = replace(
        Job.create(GOOD.validated(), T0),
        state=State.RUNNING,
        attempt=2,
        claim=Claim("run-1", T0, 3),
        enqueued_at=T0,
        message_id="m-1",
        lease_until=T0 + timedelta(minutes=5),
        lease_owner="w-1",
        cancel_requested=CancelRequest("stop", "operator:ann", T0),
        result=Result("deleted", {"n": 1}, T0),
        last_error=ErrorInfo("unavailable", "503", T0),
        history=(HistoryEntry(T0, None, State.DEFERRED, "application:app", "scheduled"),),
        expire_at=T0 + timedelta(days=30),
    )
    assert Job.from_document(job.job_id, job.to_document()) == job
    assert job.generation == 3


def test_a_minimal_document_written_by_another_language_is_readable() -> None:
    job = Job.from_document(
        "node-1",
        {
            "action": "media.delete_source",
            "subject": "m",
            "due_at": T0,
            "state": "deferred",
            "created_at": T0,
        },
    )
    assert job.generation == 0
    assert job.attempt == 1  # its first retry cycle
    assert job.max_attempts == 5
    assert job.scheduled_due_at == T0
    assert job.idempotency_key == derive_idempotency_key("media.delete_source", "node-1")


def test_a_record_written_with_attempt_0_reads_as_its_first_attempt() -> None:
    # The earlier layout started at 0; such records are in their first retry cycle.
    document = {
        "action": "media.delete_source",
        "subject": "m",
        "due_at": T0,
        "state": "deferred",
        "created_at": T0,
        "attempt": 0,
    }
    assert Job.from_document("node-0", document).attempt == 1
    assert Job.from_document("node-3", {**document, "attempt": 3}).attempt == 3


def _nested(levels: int) -> dict[str, object]:
    """`levels` maps inside params: {"k": {"k": ... {"k": 1}}}."""
    value: object = 1
    for _ in range(levels):
        value = {"k": value}
    return {"top": value}


def test_params_nested_deeper_than_firestore_allows_are_refused() -> None:
    # params is the document's first map level; Firestore allows 20, so 19 maps inside it.
    assert replace(OPEN, params=_nested(19)).validated(BOTH)
    assert "nested deeper than" in problems_of(replace(OPEN, params=_nested(20)), BOTH)
