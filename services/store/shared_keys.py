"""Shared keys: the worker's read of the idempotency documents of supplied keys.

A job scheduled with its own idempotency key may share it with other jobs; the key's document
says which lease holds it and, once completed, the result every holder reuses. The holds are
taken and checked by `leases` inside its transactions (`key_holds.py`); this role reads the
recorded result.
"""

from __future__ import annotations

from services.jobs.results import IdempotencyRecord
from services.store.documents import Documents
from services.store.transactions import store_errors


class SharedKeys:
    """Reads the result recorded under a shared idempotency key."""

    def __init__(self, docs: Documents) -> None:
        self._docs = docs

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        """The recorded result of the side effect with this key, or None. One read."""
        with store_errors():
            snapshot = self._docs.gateway.get(self._docs.idempotency.document(key))
        if not snapshot.exists:
            return None
        return IdempotencyRecord.from_document(key, snapshot.to_dict() or {})
