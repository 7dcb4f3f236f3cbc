"""RejectionStore on the Firestore emulator: write, read back, newest first, one per message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.cloud import firestore

from services.store.rejections import RejectionStore, rejection_of

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def test_rejections_read_back_newest_first_with_their_payload(
    firestore_client: firestore.Client,
) -> None:
    store = RejectionStore(firestore_client)
    for minute, body in enumerate([b"first", b"\x00\x01binary", b"third"]):
        store.record(
            rejection_of("bad_json", "x", body, {}, received_at=T0 + timedelta(minutes=minute))
        )
    recent = store.recent(limit=2)
    assert [r.payload_prefix() for r in recent] == [b"third", b"\x00\x01binary"]
    assert recent[1].payload_encoding == "base64"
    assert recent[0].expire_at == T0 + timedelta(minutes=2, days=30)


def test_the_same_message_rejected_twice_keeps_one_record(
    firestore_client: firestore.Client,
) -> None:
    store = RejectionStore(firestore_client)
    rejection = rejection_of(
        "unknown_job", "x", b"{}", {}, received_at=T0, job_id="j", message_id="m-1"
    )
    first = store.record(rejection)
    second = store.record(rejection)
    assert first == second
    assert len(store.recent()) == 1
