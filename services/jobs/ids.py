"""Job IDs: what a Firestore document ID and a job ID may be, and the derived IDs.

`job_id_problems` is the one rule `schedule` and the worker's envelope share;
`derive_job_id` and `derive_idempotency_key` give the same IDs in every language
(docs/job-record.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

MAX_ID_BYTES = 1500  # Firestore's document ID limit

RESERVED_NAME = re.compile(r"^__.*__$", re.DOTALL)
_READABLE = re.compile(r"[^A-Za-z0-9._-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def document_id_problems(value: object, what: str = "job ID") -> list[str]:
    """Why `value` cannot be a Firestore document ID (empty when it can)."""
    if not isinstance(value, str) or not value:
        return [f"{what} must be a non-empty string"]
    problems = []
    if "/" in value:
        problems.append(f"{what} {value[:80]!r} contains '/', which Firestore forbids")
    if value in {".", ".."}:
        problems.append(f"{what} cannot be {value!r}")
    if RESERVED_NAME.match(value):
        problems.append(f"{what} {value[:80]!r} matches __.*__, which Firestore reserves")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return [*problems, f"{what} is not valid UTF-8"]
    if size > MAX_ID_BYTES:
        problems.append(f"{what} is {size} bytes; Firestore allows at most {MAX_ID_BYTES}")
    return problems


def job_id_problems(value: object) -> list[str]:
    """Why `value` cannot be a job ID (empty when it can): THE rule, shared by `schedule` and
    the worker's envelope, so a job the store accepts is never refused at delivery.

    A job ID is a Firestore document ID that also travels as a Pub/Sub message body and in
    log lines and headers: no control characters (NUL, tab, newline...), no leading or
    trailing whitespace.
    """
    problems = document_id_problems(value)
    if not isinstance(value, str) or not value:
        return problems
    if _CONTROL.search(value):
        problems.append(f"job ID {value[:80]!r} contains a control character")
    if value != value.strip():
        problems.append(f"job ID {value[:80]!r} has leading or trailing whitespace")
    return problems


def is_valid_job_id(value: object) -> bool:
    return not job_id_problems(value)


def _digest(*parts: str) -> str:
    # Byte-for-byte JavaScript's JSON.stringify([...parts]), so other languages can derive
    # the same IDs (docs/job-record.md).
    encoded = json.dumps(list(parts), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def derive_job_id(action: str, subject: str, decision_id: str) -> str:
    """A deterministic, readable job ID for one logical operation.

    Same (action, subject, decision) → same ID, so scheduling a decision twice is a no-op.
    Shape: `<action>:<subject>:<decision>:<sha256 prefix>`, the readable parts sanitised and
    shortened; the hash covers the exact inputs, so different inputs never collide.
    """
    readable = ":".join(_READABLE.sub("_", part)[:100] for part in (action, subject, decision_id))
    return f"{readable}:{_digest(action, subject, decision_id)[:24]}"


# A worker asks for a job's derived key several times per delivery (`Job.explicit_key` at
# start, at the write-ahead, at completion): a hash and a JSON encoding each time. The key
# depends on its arguments alone, so the recent ones are remembered (a delivery's questions
# come within milliseconds; 4,096 covers every job in flight on an instance).
@functools.lru_cache(maxsize=4096)
def derive_idempotency_key(action: str, job_id: str) -> str:
    """The key of the logical side effect, used as the `idempotency` document's ID."""
    return f"{_READABLE.sub('_', action)[:100]}:{_digest(action, job_id)}"
