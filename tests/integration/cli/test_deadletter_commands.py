"""dead-letters list / replay against the Pub/Sub emulator, with the real clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from services.cli.errors import ExitCode
from tests.integration.cli.conftest import Jobsctl

DEAD_LETTER_ATTRIBUTES = {
    "CloudPubSubDeadLetterSourceDeliveryCount": "10",
    "CloudPubSubDeadLetterSourceSubscription": "deferred-jobs-jobs-push",
}


@pytest.fixture
def topics(
    pubsub_emulator: Any,
    firestore_project: str,
    publisher_client: Any,
    subscriber_client: Any,
) -> Iterator[dict[str, str]]:
    """The infra's names under this test's project: jobs topic (with a pull subscription so the
    test can see replays), dead-letter topic and its pull subscription."""
    project = firestore_project
    paths = {
        "topic": f"projects/{project}/topics/deferred-jobs-jobs",
        "jobs_sub": f"projects/{project}/subscriptions/test-jobs-pull",
        "dl_topic": f"projects/{project}/topics/deferred-jobs-dead-letter",
        "dl_sub": f"projects/{project}/subscriptions/deferred-jobs-dead-letter-pull",
    }
    publisher_client.create_topic(name=paths["topic"])
    publisher_client.create_topic(name=paths["dl_topic"])
    subscriber_client.create_subscription(name=paths["jobs_sub"], topic=paths["topic"])
    subscriber_client.create_subscription(name=paths["dl_sub"], topic=paths["dl_topic"])
    yield paths


def _dead_letter(publisher: Any, topics: dict[str, str], job_id: str, generation: int) -> None:
    publisher.publish(
        topics["dl_topic"],
        job_id.encode(),
        generation=str(generation),
        run_id="run-1",
        **DEAD_LETTER_ATTRIBUTES,
    ).result(timeout=10)


def _pull_all(subscriber: Any, path: str) -> list[Any]:
    received = subscriber.pull(subscription=path, max_messages=100, timeout=5).received_messages
    if received:
        subscriber.acknowledge(subscription=path, ack_ids=[r.ack_id for r in received])
    return [r.message for r in received]


def test_list_shows_dead_letters_without_acknowledging_them(
    jobsctl: Jobsctl, topics: dict[str, str], publisher_client: Any
) -> None:
    _dead_letter(publisher_client, topics, "job-a", 3)
    _dead_letter(publisher_client, topics, "job-b", 1)
    first = jobsctl("dead-letters", "list", "--json")
    second = jobsctl("dead-letters", "list")
    assert first.code == second.code == ExitCode.OK, first.err
    letters = first.json()["dead_letters"]
    assert sorted(d["job_id"] for d in letters) == ["job-a", "job-b"]
    assert "2 dead letter(s)" in second.out  # still there: listing acked nothing
    assert "job-a" in second.out and "10" in second.out


def test_replay_republishes_job_ids_with_their_attributes_then_acks(
    jobsctl: Jobsctl, topics: dict[str, str], publisher_client: Any, subscriber_client: Any
) -> None:
    _dead_letter(publisher_client, topics, "job-a", 3)
    _dead_letter(publisher_client, topics, "job-b", 1)
    result = jobsctl("dead-letters", "replay", "--apply")
    assert result.code == ExitCode.OK, result.err
    assert "replayed 2" in result.out and "replaying: [" in result.err
    replayed = _pull_all(subscriber_client, topics["jobs_sub"])
    assert sorted((m.data.decode(), m.attributes["generation"]) for m in replayed) == [
        ("job-a", "3"),
        ("job-b", "1"),
    ]
    # Pub/Sub's own dead-letter attributes are not part of the job message.
    assert all(not k.startswith("CloudPubSub") for m in replayed for k in m.attributes)
    assert jobsctl("dead-letters", "list", "--json").json()["dead_letters"] == []


def test_replay_of_chosen_jobs_leaves_the_others_dead_lettered(
    jobsctl: Jobsctl, topics: dict[str, str], publisher_client: Any, subscriber_client: Any
) -> None:
    _dead_letter(publisher_client, topics, "job-a", 3)
    _dead_letter(publisher_client, topics, "job-b", 1)
    dry = jobsctl("dead-letters", "replay", "--job", "job-b", "--json")  # a dry run
    assert [d["job_id"] for d in dry.json()["dead_letters"]] == ["job-b"]
    assert _pull_all(subscriber_client, topics["jobs_sub"]) == []
    result = jobsctl("dead-letters", "replay", "--job", "job-b", "--apply")
    assert result.code == ExitCode.OK
    assert [m.data for m in _pull_all(subscriber_client, topics["jobs_sub"])] == [b"job-b"]
    left = jobsctl("dead-letters", "list", "--json").json()["dead_letters"]
    assert [d["job_id"] for d in left] == ["job-a"]


def test_a_missing_dead_letter_subscription_is_reported(
    jobsctl: Jobsctl, pubsub_emulator: Any
) -> None:
    result = jobsctl("dead-letters", "list", "--subscription", "nope")
    assert result.code == ExitCode.UNAVAILABLE
    assert "no dead-letter subscription" in result.err


def test_replay_of_a_job_with_no_dead_letter_exits_1_and_replays_nothing(
    jobsctl: Jobsctl, topics: dict[str, str], publisher_client: Any, subscriber_client: Any
) -> None:
    _dead_letter(publisher_client, topics, "job-a", 3)
    result = jobsctl("dead-letters", "replay", "--job", "job-a", "--job", "nosuch", "--apply")
    assert result.code == ExitCode.REFUSED
    assert "no dead letter for job(s) nosuch" in result.err
    assert _pull_all(subscriber_client, topics["jobs_sub"]) == []
    left = jobsctl("dead-letters", "list", "--json").json()["dead_letters"]
    assert [d["job_id"] for d in left] == ["job-a"]


def test_replay_is_a_dry_run_unless_applied(
    jobsctl: Jobsctl, topics: dict[str, str], publisher_client: Any, subscriber_client: Any
) -> None:
    _dead_letter(publisher_client, topics, "job-a", 3)
    dry = jobsctl("dead-letters", "replay")
    assert dry.code == ExitCode.OK and "dry run: 1 would be replayed" in dry.out
    assert _pull_all(subscriber_client, topics["jobs_sub"]) == []
