"""Issue 33, finding 5, the scan's side: ABORTED on the enqueue marks' conditional batch
(BatchWrite, each write conditioned on the claim's update_time, outside a transaction) and on
the claim's commits is settled (the marks fall back to one transaction per page, which
retries ABORTED), so every published job is recorded `enqueued`, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.scan.conftest import Rig


@pytest.mark.builtin_emulator("fault injection")
def test_aborted_on_the_enqueue_marks_and_the_claim_settles_every_job_once(
    scan_rig: Callable[..., Rig], firestore_emulator: Any
) -> None:
    rig = scan_rig()
    ids = rig.seed(5)
    firestore_emulator.inject_fault("BatchWrite", "ABORTED")
    firestore_emulator.inject_fault("Commit", "ABORTED", count=3)
    try:
        response = rig.post()
        spent = firestore_emulator.faults.describe()
    finally:
        firestore_emulator.clear_faults()
    assert response.status_code == 200, response.get_data(as_text=True)
    assert spent == [], spent  # every injected ABORTED was met
    assert response.get_json()["claimed"] == 5
    assert rig.states(ids) == {"enqueued": 5}
    assert sum(rig.pull().values()) == 5
