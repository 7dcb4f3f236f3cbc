"""The `rejected` collection: push messages the worker acknowledged but could never process.

A malformed envelope, bad base64, an oversize body or an unknown job ID is acknowledged (a
redelivery would fail the same way) and kept here for an operator: why, the first bytes of the
payload (text, or base64 when binary), a safe subset of the headers (never `Authorization`),
when, and `expire_at` for the TTL policy. `RejectionStore.recent` is the reader the CLI uses.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.cloud import firestore

from services.jobs.errors import StoreUnavailable
from services.jobs.schema import EXPIRE_AT, REJECTED
from services.store.bounds import DEFAULT_CALL_TIMEOUT_S, CallBounds

PAYLOAD_LIMIT = 4096
DEFAULT_RETENTION = datetime.timedelta(days=30)
MAX_DETAIL_CHARS = 500
MAX_HEADER_CHARS = 256

# Headers worth keeping: the delivery's metadata and the attributes `no_wrapper` turns into
# headers. Credentials never match this list.
_KEPT_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "user-agent",
        "from",
        "x-cloud-trace-context",
        "generation",
        "run_id",
    }
)
_KEPT_PREFIX = "x-goog-pubsub-"

PayloadEncoding = Literal["utf-8", "base64"]


@dataclass(frozen=True)
class Rejection:
    """One rejected push request, as stored."""

    reason: str
    detail: str
    payload: str
    payload_encoding: PayloadEncoding
    payload_bytes: int
    truncated: bool
    headers: Mapping[str, str]
    received_at: datetime.datetime
    expire_at: datetime.datetime
    job_id: str | None = None
    message_id: str | None = None
    rejection_id: str = field(default="", compare=False)

    def to_document(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "detail": self.detail,
            "payload": self.payload,
            "payload_encoding": self.payload_encoding,
            "payload_bytes": self.payload_bytes,
            "truncated": self.truncated,
            "headers": dict(self.headers),
            "received_at": self.received_at,
            EXPIRE_AT: self.expire_at,
            "job_id": self.job_id,
            "message_id": self.message_id,
        }

    @classmethod
    def from_document(cls, rejection_id: str, data: Mapping[str, Any]) -> Rejection:
        encoding: PayloadEncoding = (
            "base64" if data.get("payload_encoding") == "base64" else "utf-8"
        )
        return cls(
            reason=str(data.get("reason", "")),
            detail=str(data.get("detail", "")),
            payload=str(data.get("payload", "")),
            payload_encoding=encoding,
            payload_bytes=int(data.get("payload_bytes", 0)),
            truncated=bool(data.get("truncated", False)),
            headers=dict(data.get("headers") or {}),
            received_at=data["received_at"],
            expire_at=data[EXPIRE_AT],
            job_id=data.get("job_id"),
            message_id=data.get("message_id"),
            rejection_id=rejection_id,
        )

    def payload_prefix(self) -> bytes:
        """The stored first bytes of the payload, decoded back to bytes."""
        if self.payload_encoding == "base64":
            return base64.b64decode(self.payload)
        return self.payload.encode("utf-8")


def rejection_of(
    reason: str,
    detail: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    received_at: datetime.datetime,
    body_bytes: int | None = None,
    retention: datetime.timedelta = DEFAULT_RETENTION,
    job_id: str | None = None,
    message_id: str | None = None,
) -> Rejection:
    """A Rejection for `body`; `body_bytes` is the full size when only a prefix was read."""
    prefix = body[:PAYLOAD_LIMIT]
    payload, encoding = _printable(prefix)
    size = len(body) if body_bytes is None else max(body_bytes, len(body))
    return Rejection(
        reason=reason,
        detail=detail[:MAX_DETAIL_CHARS],
        payload=payload,
        payload_encoding=encoding,
        payload_bytes=size,
        truncated=size > len(prefix),
        headers=kept_headers(headers),
        received_at=received_at,
        expire_at=received_at + retention,
        job_id=job_id[:MAX_HEADER_CHARS] if job_id else None,
        message_id=message_id[:MAX_HEADER_CHARS] if message_id else None,
    )


def kept_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers worth storing, lower-cased and bounded."""
    kept: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key in _KEPT_HEADERS or key.startswith(_KEPT_PREFIX):
            kept[key[:MAX_HEADER_CHARS]] = str(value)[:MAX_HEADER_CHARS]
    return kept


def _printable(prefix: bytes) -> tuple[str, PayloadEncoding]:
    try:
        text = prefix.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A cut through a multi-byte character at the limit is still text.
        if exc.start < len(prefix) - 3 or len(prefix) < PAYLOAD_LIMIT:
            return base64.b64encode(prefix).decode("ascii"), "base64"
        return _printable(prefix[: exc.start])
    if "\x00" in text:
        return base64.b64encode(prefix).decode("ascii"), "base64"
    return text, "utf-8"


# What a bounded call raises when Firestore does not answer in time or at all.
_UNAVAILABLE = (api_exceptions.GoogleAPICallError, api_exceptions.RetryError)


class RejectionStore:
    """Writes and reads the `rejected` collection."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = REJECTED,
        timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        retry: api_retry.Retry | None = None,
    ) -> None:
        self._collection = client.collection(collection)
        self._bounds = CallBounds(timeout_s, retry)

    def record(self, rejection: Rejection) -> str:
        """Store `rejection`; returns its document ID.

        A message Pub/Sub delivers twice (our ack lost) lands on the same document, keyed by
        its message ID and reason; without a message ID every rejection gets its own document.
        """
        if rejection.message_id:
            key = f"{rejection.message_id}\x00{rejection.reason}".encode()
            ref = self._collection.document(hashlib.sha256(key).hexdigest()[:40])
            # Safe to retry: the same document gets the same content.
            bounds = self._bounds.kwargs
        else:
            ref = self._collection.document()
            bounds = self._bounds.write_kwargs  # a retry could leave a second document
        try:
            ref.set(rejection.to_document(), **bounds)
        except _UNAVAILABLE as exc:
            raise StoreUnavailable(f"cannot record a rejection: {type(exc).__name__}") from exc
        return str(ref.id)

    def recent(self, limit: int = 50) -> list[Rejection]:
        """The newest rejections first."""
        query = self._collection.order_by(
            "received_at", direction=firestore.Query.DESCENDING
        ).limit(limit)
        try:
            return [
                Rejection.from_document(snapshot.id, snapshot.to_dict() or {})
                for snapshot in query.stream(**self._bounds.kwargs)
            ]
        except _UNAVAILABLE as exc:
            raise StoreUnavailable(f"cannot read rejections: {type(exc).__name__}") from exc

    def get(self, rejection_id: str) -> Rejection | None:
        try:
            snapshot = self._collection.document(rejection_id).get(**self._bounds.kwargs)
        except _UNAVAILABLE as exc:
            raise StoreUnavailable(f"cannot read a rejection: {type(exc).__name__}") from exc
        if not snapshot.exists:
            return None
        return Rejection.from_document(snapshot.id, snapshot.to_dict() or {})
