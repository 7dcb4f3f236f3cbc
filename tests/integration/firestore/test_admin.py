"""Admin HTTP API: reset, billing-style stats, fault injection; and BatchWrite via BulkWriter."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import firestore

pytestmark = pytest.mark.builtin_emulator(
    "the admin HTTP API: reset, billing counters, fault injection"
)


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_reset_endpoint_deletes_only_that_projects_documents(
    firestore_emulator: Any, firestore_client: Any, firestore_project: str
) -> None:
    firestore_client.collection("jobs").document("a").set({"x": 1})
    other = firestore.Client(project=firestore_project + "-keep")
    try:
        other.collection("jobs").document("a").set({"x": 1})
        path = f"/emulator/v1/projects/{firestore_project}/databases/(default)/documents"
        status, _ = _http("DELETE", firestore_emulator.admin_url + path)
        assert status == 200
        assert not firestore_client.collection("jobs").document("a").get().exists
        assert other.collection("jobs").document("a").get().exists
        firestore_client.collection("jobs").document("b").set({"x": 1})
        encoded = path.replace("(", "%28").replace(")", "%29")
        status, _ = _http("DELETE", firestore_emulator.admin_url + encoded)
        assert status == 200
        assert not firestore_client.collection("jobs").document("b").get().exists
    finally:
        other.close()


def test_stats_count_reads_writes_deletes_and_calls_per_project(
    firestore_emulator: Any, firestore_client: Any, firestore_project: str
) -> None:
    jobs = firestore_client.collection("jobs")
    batch = firestore_client.batch()
    batch.set(jobs.document("a"), {"x": 1})
    batch.set(jobs.document("b"), {"x": 2})
    batch.delete(jobs.document("c"))
    batch.commit()
    list(firestore_client.get_all([jobs.document("a"), jobs.document("missing")]))
    jobs.document("a").get()
    status, stats = _http(
        "GET", f"{firestore_emulator.admin_url}/stats?project={firestore_project}"
    )
    assert status == 200
    assert stats["document_writes"] == 2
    assert stats["document_deletes"] == 1
    assert stats["document_reads"] == 3  # a get bills every document asked for, found or not
    assert stats["calls"] == {"BatchGetDocuments": 2, "Commit": 1}
    _, totals = _http("GET", f"{firestore_emulator.admin_url}/stats")
    assert totals["document_writes"] >= 2
    status, _ = _http("DELETE", f"{firestore_emulator.admin_url}/stats?project={firestore_project}")
    assert status == 200
    assert firestore_emulator.stats(firestore_project)["document_writes"] == 0


def test_stats_fixture_reports_this_projects_counters(
    firestore_client: Any, firestore_stats: Any
) -> None:
    firestore_client.collection("jobs").document("a").set({"x": 1})
    assert firestore_stats.get()["document_writes"] == 1
    firestore_stats.reset()
    assert firestore_stats.get()["calls"] == {}


def test_injected_fault_fails_the_next_calls_then_clears(
    firestore_emulator: Any, firestore_client: Any
) -> None:
    ref = firestore_client.collection("jobs").document("a")
    status, _ = _http(
        "POST",
        firestore_emulator.admin_url + "/faults",
        {"method": "Commit", "status": "PERMISSION_DENIED", "count": 2},
    )
    assert status == 200
    for _ in range(2):
        with pytest.raises(exceptions.PermissionDenied):
            ref.set({"x": 1})
    ref.set({"x": 2})
    assert ref.get().get("x") == 2


def test_unavailable_fault_is_retried_by_the_client(
    firestore_emulator: Any, firestore_client: Any, firestore_stats: Any
) -> None:
    firestore_emulator.inject_fault("RunQuery", status="UNAVAILABLE", count=1)
    firestore_client.collection("jobs").document("a").set({"x": 1})
    assert [d.id for d in firestore_client.collection("jobs").stream()] == ["a"]
    assert firestore_stats.get()["calls"]["RunQuery"] == 2


def test_delay_fault_slows_calls_without_failing_them(
    firestore_emulator: Any, firestore_client: Any
) -> None:
    firestore_emulator.inject_fault("BatchGetDocuments", delay_s=0.05, count=2)
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"x": 1})
    assert ref.get().get("x") == 1
    assert ref.get().get("x") == 1
    assert firestore_emulator.faults.pending() == []


def test_delete_faults_clears_pending_faults(
    firestore_emulator: Any, firestore_client: Any
) -> None:
    firestore_emulator.inject_fault("Commit", status="INTERNAL", count=5)
    status, _ = _http("DELETE", firestore_emulator.admin_url + "/faults")
    assert status == 200
    firestore_client.collection("jobs").document("a").set({"x": 1})


def test_bad_fault_request_is_rejected_with_400(firestore_emulator: Any) -> None:
    status, body = _http(
        "POST", firestore_emulator.admin_url + "/faults", {"method": "Commit", "status": "NOPE"}
    )
    assert status == 400
    assert "NOPE" in body["error"]


def test_bulk_writer_uses_batch_write_with_a_status_per_write(
    firestore_client: Any, firestore_stats: Any
) -> None:
    jobs = firestore_client.collection("jobs")
    jobs.document("taken").set({"x": 0})
    failures: list[str] = []

    def on_error(error: Any, bulk_writer: Any) -> bool:
        failures.append(error.operation.reference.id)
        return False  # do not retry

    writer = firestore_client.bulk_writer()
    writer.on_write_error(on_error)
    for i in range(5):
        writer.create(jobs.document(f"d{i}"), {"i": i})
    writer.create(jobs.document("taken"), {"x": 1})
    writer.close()
    assert failures == ["taken"]
    assert sorted(d.id for d in jobs.stream()) == ["d0", "d1", "d2", "d3", "d4", "taken"]
    assert jobs.document("taken").get().get("x") == 0
    assert firestore_stats.get()["calls"].get("BatchWrite", 0) >= 1
