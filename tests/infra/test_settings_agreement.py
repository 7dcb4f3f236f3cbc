"""Any configuration the stack accepts yields an environment every service's Settings accept.

The stack validates its keys (infra/config.py); the services validate their JOBS_* variables
(services/scan/settings.py, services/worker/settings.py, services/api/settings.py). If the two
disagree, a `pulumi up` succeeds and the service then fails at its start; this property test
finds such a gap.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from infra import env
from infra.api import api_environment
from infra.config import _SERVICE_ACCOUNT as SERVICE_ACCOUNT
from infra.config import parse_config
from infra.cron import parse_cron
from services.api.settings import ApiSettings
from services.scan.settings import ScanSettings
from services.worker.settings import WorkerSettings

API_URL = "https://deferred-jobs-api-123456789012.europe-west1.run.app"
WIRING = env.Wiring(
    topic_name="deferred-jobs-jobs",
    subscription_name="deferred-jobs-jobs-push",
    scan_url="https://deferred-jobs-scan-123456789012.europe-west1.run.app",
    worker_url="https://deferred-jobs-worker-123456789012.europe-west1.run.app",
    scheduler_invoker_email="deferred-jobs-scheduler@p.iam.gserviceaccount.com",
    push_invoker_email="deferred-jobs-pusher@p.iam.gserviceaccount.com",
)


@st.composite
def accepted_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Values inside every range and cross-key rule of infra/config.py."""
    deadline = draw(st.integers(15, 1800))
    schedule = draw(st.sampled_from(["* * * * *", "*/5 * * * *", "0 * * * *", "0 */7 * * *"]))
    mode = draw(st.sampled_from(["one-pass", "paced"]))
    if mode == "paced":
        # A paced run works its time budget, which ends 10 s before the next run at the
        # latest, and polls more often than that.
        interval = parse_cron(schedule).longest_gap_s()
        budget = draw(st.integers(2, min(deadline - 2, interval - 10)))
        poll = draw(st.integers(1, min(60, budget - 1)))
    else:
        budget = draw(st.integers(1, deadline - 2))
        poll = draw(st.integers(1, 60))
    ack = draw(st.integers(10, 600))
    # request timeout < lease < ack deadline; a delivery acts a whole second at least, so
    # the request timeout is 2 s or more
    request = draw(st.integers(2, ack - 2))
    lease = draw(st.integers(max(5, request + 1), ack - 1))
    # 0 (automatic) or explicit, below the request timeout and a third of the lease
    max_delivery = draw(st.sampled_from([0, draw(st.integers(1, request - 1))]))
    margins = [0] + ([draw(st.integers(1, lease // 3 - 1))] if lease // 3 > 1 else [])
    margin = draw(st.sampled_from(margins))
    dead_letter = draw(st.integers(5, 100))
    return {
        "image": "img",
        "mediaBucket": "deferred-jobs-media",
        "gcp:project": "p",
        "gcp:region": "europe-west1",
        "alertEmails": [],
        "schedule": schedule,
        "scanMode": mode,
        "scanPollS": poll,
        "scanEndWhenIdle": draw(st.booleans()),
        "scanAttemptDeadlineS": deadline,
        "scanTimeBudgetS": budget,
        "scanPublishTimeoutS": draw(st.integers(1, min(600, deadline - 1 - budget))),
        "claimTimeoutS": draw(st.integers(deadline + 1, 86_400)),
        "scanMaxPerRun": draw(st.integers(1, 100_000)),
        "pushAckDeadlineS": ack,
        "workerRequestTimeoutS": request,
        "workerLeaseS": lease,
        "workerMaxDeliveryS": max_delivery,
        "workerDeadlineMarginS": margin,
        "retryLaterDelayS": draw(st.integers(60, 3650 * 86_400)),
        "deadLetterAttempts": dead_letter,
        "retryLaterAfterAttempts": draw(st.integers(1, dead_letter - 1)),
        "apiCallers": draw(
            st.lists(
                # Any email the stack's own apiCallers check accepts.
                st.from_regex(SERVICE_ACCOUNT),
                max_size=4,
                unique=True,
            )
        ),
    }


@settings(max_examples=150, deadline=None)
@given(accepted_configs())
def test_every_accepted_stack_config_gives_environments_the_services_accept(
    values: dict[str, Any],
) -> None:
    config = parse_config(values)
    # WIRING holds plain strings, so every value here is a str.
    # Cloud Run sets K_SERVICE in every container; the behind-IAM flag requires it.
    on_cloud_run = {"K_SERVICE": "deferred-jobs"}
    ScanSettings.from_env(
        {**{k: str(v) for k, v in env.scan_environment(config, WIRING).items()}, **on_cloud_run}
    )
    worker = WorkerSettings.from_env(
        {**{k: str(v) for k, v in env.worker_environment(config, WIRING).items()}, **on_cloud_run}
    )
    # What the worker reads keeps its deadlines inside Cloud Run's and the lease's.
    assert 1 <= worker.max_delivery_s < config.worker_request_timeout_s
    assert 0 <= worker.deadline_margin_s < worker.lease_s / 3
    assert (worker.max_delivery_s, worker.deadline_margin_s) == (
        values["workerMaxDeliveryS"] or worker.max_delivery_s,
        values["workerDeadlineMarginS"] or worker.deadline_margin_s,
    )
    if config.api_callers:  # no callers: no api service (infra/api.py)
        api = ApiSettings.from_env(
            {**{k: str(v) for k, v in api_environment(config, API_URL).items()}, **on_cloud_run}
        )
        assert api.allowed_callers == frozenset(config.api_callers)
        assert api.behind_cloud_run_iam
