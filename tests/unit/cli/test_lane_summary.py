"""`jobsctl runs` and `jobsctl watch` show a run's claim lanes by key, a target's lane readable
(services/cli/view.py `lane_summary`, services/jobs/lanes.py `lane_label`)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.cli.view import lane_summary
from services.jobs.lanes import REST


def test_a_runs_lanes_read_by_key_with_target_lanes_named_by_their_target() -> None:
    until = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    lanes = {
        "http.request/trials": {"claimed": 300, "budget": 300, "rate_per_s": 5.0},
        "http.request/billing": {"claimed": 0, "budget": 0, "paused_until": until},
        REST: {"claimed": 1_200, "budget": 1_200, "rate_per_s": None},
    }
    assert lane_summary(lanes) == (
        "http.request target trials 300/300 at 5/s; "
        "http.request target billing paused until 12:00:30Z; rest 1,200/1,200"
    )
