"""A plug-in's action end to end on the Firestore emulator: scheduled through `jobsctl` and the
Python store with its params checked, listed by `jobsctl actions`, refused a rollout by `jobsctl
actions check`; a worker without the plug-in defers its jobs (none failed, no attempt spent),
and a worker with it then completes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.jobs.catalogue import Catalogue, load_catalogue
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from services.worker.actions import ActionContext, ActionRegistry, bind
from services.worker.envelope import Delivery
from services.worker.processor import OutcomeKind, Processor
from tests.fixtures.store import mark_enqueued
from tests.integration.cli.conftest import Jobsctl
from tests.unit.worker.test_app import SETTINGS as WORKER_SETTINGS

LEASE = timedelta(seconds=60)


def _deliver_due(store: FirestoreJobStore, processor: Processor, run_id: str) -> list[OutcomeKind]:
    """What a scan run and the pushes after it do: claim what is due, enqueue, deliver."""
    claimed = store.claim_due(store.clock.now(), run_id, 50)
    kinds = []
    for index, job in enumerate(claimed):
        mark_enqueued(store, job.job_id, job.generation, f"{run_id}-{index}")
        delivery = Delivery(job.job_id, job.generation, run_id=run_id, delivery_attempt=1)
        kinds.append(processor.process(delivery).kind)
    return kinds


def test_a_plugins_jobs_wait_for_a_worker_that_knows_them_then_complete(
    trials_plugin: Path, jobsctl: Jobsctl, firestore_client: Any
) -> None:
    clock = FakeClock(datetime.now(UTC))
    store = FirestoreJobStore(firestore_client, clock)  # the catalogue, plug-in included
    # jobsctl checks the plug-in's params at schedule time, naming the field...
    refused = jobsctl("schedule", "--action", "trials.expire", "--job-id", "trial-0",
                      "--subject", "trial-0", "--param", "trail_id=t-0")  # fmt: skip
    assert refused.code == 2 and "params.trial_id is required for trials.expire" in refused.err
    done = jobsctl("schedule", "--action", "trials.expire", "--job-id", "trial-0",
                   "--subject", "trial-0", "--param", "trial_id=t-0")  # fmt: skip
    assert done.code == 0, done.err
    # ... and so does the Python store.
    for n in range(1, 4):
        store.schedule(NewJob(f"trial-{n}", "trials.expire", f"trial-{n}", clock.now(),
                              {"trial_id": f"t-{n}"}))  # fmt: skip

    listed = jobsctl("actions", "--json").json()["actions"]
    assert {a["name"]: a["pending"] for a in listed} == {
        "media.delete_source": 0,
        "media.delete_prefix": 0,
        "http.request": 0,
        "trials.expire": 4,
    }
    lacking = jobsctl("actions", "check", "--worker-actions", "media.delete_source")
    assert lacking.code == 1 and "trials.expire: 4 pending" in lacking.out
    ok = jobsctl("actions", "check", "--worker-actions", "media.delete_source,trials.expire")
    assert ok.code == 0, ok.out

    # A worker deployed without the plug-in: every job deferred, none failed, no attempt spent.
    clock.advance(timedelta(seconds=1))
    old = Processor(store, ActionRegistry(), clock, lease=LEASE, worker_id="old")
    assert _deliver_due(store, old, "run-1") == [OutcomeKind.UNKNOWN_ACTION] * 4
    jobs = [store.get(f"trial-{n}") for n in range(4)]
    assert all(j is not None and j.state is State.DEFERRED and j.attempt == 1 for j in jobs)
    assert store.stats(clock.now(), timedelta(minutes=5)).per_state[State.FAILED] == 0

    # The worker with the plug-in, once the jobs are due again: every one completes.
    clock.advance(timedelta(minutes=6))
    plugin = load_catalogue().get("trials.expire")
    assert plugin is not None
    registry = bind(Catalogue([plugin]), ActionContext(WORKER_SETTINGS))
    new = Processor(store, registry, clock, lease=LEASE, worker_id="new")
    assert _deliver_due(store, new, "run-2") == [OutcomeKind.COMPLETED] * 4
    for n in range(4):
        job = store.get(f"trial-{n}")
        assert job is not None and job.state is State.COMPLETED and job.attempt == 1
        assert job.result is not None and job.result.details == {"trial": f"t-{n}"}


@pytest.mark.usefixtures("trials_plugin")
def test_jobsctl_actions_lists_the_catalogue_with_its_sources(jobsctl: Jobsctl) -> None:
    run = jobsctl("actions")
    assert run.code == 0, run.err
    assert "trials.expire" in run.out and "my-trials 1.0" in run.out and "5/s" in run.out
    names = jobsctl("actions", "--names")
    assert names.out.split() == [
        "media.delete_source",
        "media.delete_prefix",
        "http.request",
        "trials.expire",
    ]
