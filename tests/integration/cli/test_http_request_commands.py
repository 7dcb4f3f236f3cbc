"""`jobsctl schedule --action http.request` on the Firestore emulator: jobsctl reads the targets
from its environment (JOBS_HTTP_TARGETS, the services' key) and refuses an unknown target or a
bad path before writing anything, naming the field; bad targets stop it naming the key."""

from __future__ import annotations

import pytest

from services.store.job_store import FirestoreJobStore
from tests.integration.cli.conftest import Jobsctl

TARGETS = '{"trials": {"url": "https://trials.example.run.app"}}'


def test_jobsctl_checks_the_target_and_path_against_its_environment(
    jobsctl: Jobsctl, store: FirestoreJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = jobsctl("schedule", "--action", "http.request", "--job-id", "call-0",
                      "--subject", "trial-1", "--param", "target=trials", "--param",
                      "path=/trials/1:expire")  # fmt: skip
    assert unknown.code == 2
    assert "params.target: unknown target 'trials'" in unknown.err
    assert "none configured (JOBS_HTTP_TARGETS)" in unknown.err

    monkeypatch.setenv("JOBS_HTTP_TARGETS", TARGETS)
    bad_path = jobsctl("schedule", "--action", "http.request", "--job-id", "call-1",
                       "--subject", "trial-1", "--param", "target=trials", "--param",
                       "path=/a/%2E%2E/admin")  # fmt: skip
    assert bad_path.code == 2 and "params.path: no '.' or '..' segments" in bad_path.err
    done = jobsctl("schedule", "--action", "http.request", "--job-id", "call-2",
                   "--subject", "trial-1", "--param", "target=trials", "--param",
                   "path=/trials/1:expire", "--param", 'body={"notify": true}')  # fmt: skip
    assert done.code == 0, done.err
    job = store.get("call-2")
    assert job is not None
    assert dict(job.params) == {"target": "trials", "path": "/trials/1:expire",
                                "body": {"notify": True}}  # fmt: skip
    assert store.get("call-0") is None and store.get("call-1") is None


def test_bad_targets_in_the_environment_stop_jobsctl_naming_the_key(
    jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBS_HTTP_TARGETS", '{"trials": {"url": "http://trials.example"}}')
    stopped = jobsctl("stats")
    assert stopped.code == 2
    assert "JOBS_HTTP_TARGETS.trials.url: plain http" in stopped.err
