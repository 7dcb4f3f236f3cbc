"""Dead letters: inspect the dead-letter pull subscription, and replay messages to the jobs topic.

`list` pulls and then immediately releases every message (ack deadline 0): nothing is removed,
so listing twice shows the same messages. `replay` republishes each message's job ID with its
original attributes (generation, run_id) to the jobs topic, waits for the publish to be
acknowledged, and only then acks the dead letter. The job record is not touched: the worker
re-reads it on delivery, so a job that was cancelled or completed meanwhile, or whose
generation moved on, is acknowledged and ignored there, exactly as for any duplicate delivery.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from services.cli.backends import DEAD_LETTER_SUBSCRIPTION
from services.cli.errors import BackendUnavailable, Refused, UsageError
from services.cli.output import Report, table
from services.cli.session import Session
from services.edge.resource_names import Names
from services.edge.scan_deployment import TOPIC

# infra's names for its default namePrefix (JOBS_TOPIC / JOBS_DEAD_LETTER_SUBSCRIPTION override).
DEFAULT_TOPIC = Names.for_prefix().topic
DEFAULT_DEAD_LETTER_SUBSCRIPTION = Names.for_prefix().dead_letter_subscription
# Attributes Pub/Sub adds when it dead-letters a message; they are not the job's.
DEAD_LETTER_ATTRIBUTE_PREFIX = "CloudPubSubDeadLetter"
_PULL_BATCH = 100
_PULL_TIMEOUT_S = 5.0
_PUBLISH_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered message, as pulled (ack_id lets us ack or release it)."""

    ack_id: str
    message_id: str
    job_id: str
    attributes: dict[str, str]
    publish_time: Any

    @property
    def job_attributes(self) -> dict[str, str]:
        return {
            k: v
            for k, v in self.attributes.items()
            if not k.startswith(DEAD_LETTER_ATTRIBUTE_PREFIX)
        }

    @property
    def delivery_count(self) -> str:
        return self.attributes.get("CloudPubSubDeadLetterSourceDeliveryCount", "")

    def describe(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "job_id": self.job_id,
            "attributes": self.attributes,
            "publish_time": self.publish_time,
        }


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "dead-letters",
        parents=[common],
        help="inspect or replay dead-lettered job messages",
        description="Needs PUBSUB_EMULATOR_HOST (local) or Google credentials.",
    )
    actions = p.add_subparsers(dest="dead_letter_command", metavar="ACTION", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--subscription",
        help=f"dead-letter pull subscription ({DEAD_LETTER_SUBSCRIPTION}, "
        f"default {DEFAULT_DEAD_LETTER_SUBSCRIPTION})",
    )
    shared.add_argument(
        "--max", type=int, default=1000, help="at most this many messages (default 1000)"
    )

    show = actions.add_parser(
        "list", parents=[common, shared], help="list dead letters without acknowledging them"
    )
    show.set_defaults(handler=list_dead_letters)

    replay = actions.add_parser(
        "replay",
        parents=[common, shared],
        help="republish dead-lettered job IDs to the jobs topic, then ack them "
        "(dry run unless --apply)",
        description="Without --apply, list what would be replayed and acknowledge nothing. "
        "--job naming a job with no dead letter is refused (exit 1) and replays nothing.",
    )
    replay.add_argument("--topic", help=f"jobs topic ({TOPIC}, default {DEFAULT_TOPIC})")
    replay.add_argument(
        "--job",
        action="append",
        default=[],
        metavar="JOB_ID",
        help="replay only these job IDs (repeatable); others stay dead-lettered",
    )
    replay.add_argument(
        "--apply",
        action="store_true",
        help="replay them (default: a dry run that shows what would be replayed, like reclaim)",
    )
    replay.set_defaults(handler=replay_dead_letters)


def list_dead_letters(session: Session, args: argparse.Namespace) -> Report:
    _check_max(args.max)
    subscriber = session.backends.subscriber()
    path = _subscription_path(session, args.subscription)
    letters = _pull(session, subscriber, path, args.max)
    _release(subscriber, path, letters)
    return _report(letters, f"({len(letters):,} dead letter(s) in {path}; none acknowledged)")


def replay_dead_letters(session: Session, args: argparse.Namespace) -> Report:
    _check_max(args.max)
    subscriber = session.backends.subscriber()
    path = _subscription_path(session, args.subscription)
    letters = _pull(session, subscriber, path, args.max)
    wanted = set(args.job)
    chosen = [d for d in letters if not wanted or d.job_id in wanted]
    skipped = [d for d in letters if d not in chosen]
    missing = sorted(wanted - {d.job_id for d in letters})
    if missing:
        _release(subscriber, path, letters)
        raise Refused(f"no dead letter for job(s) {', '.join(missing)} in {path}; nothing replayed")
    if not args.apply:
        _release(subscriber, path, letters)
        return _report(
            chosen, f"(dry run: {len(chosen):,} would be replayed; add --apply to do it)"
        )
    _release(subscriber, path, skipped)
    topic = _topic_path(session, args.topic)
    publisher = session.backends.publisher()
    progress = session.progress("replaying", len(chosen))
    replayed: list[DeadLetter] = []
    try:
        for start in range(0, len(chosen), _PULL_BATCH):
            batch = chosen[start : start + _PULL_BATCH]
            futures = [
                publisher.publish(topic, d.job_id.encode("utf-8"), **d.job_attributes)
                for d in batch
            ]
            for future in futures:
                future.result(timeout=_PUBLISH_TIMEOUT_S)
            # Ack only once every job ID of the batch is safely back on the jobs topic. If one
            # publish fails, the whole batch stays dead-lettered; replaying it again may publish
            # some IDs twice, which the worker treats like any duplicate delivery.
            subscriber.acknowledge(subscription=path, ack_ids=[d.ack_id for d in batch])
            replayed.extend(batch)
            progress.advance(len(batch))
    finally:
        progress.finish()
        _release(subscriber, path, [d for d in chosen if d not in replayed])
    return _report(replayed, f"(replayed {len(replayed):,} to {topic})")


def _pull(session: Session, subscriber: Any, path: str, limit: int) -> list[DeadLetter]:
    """Pull until the subscription is drained or `limit` messages are held."""
    letters: dict[str, DeadLetter] = {}
    progress = session.progress("reading dead letters")
    try:
        while len(letters) < limit:
            try:
                response = subscriber.pull(
                    subscription=path,
                    max_messages=min(_PULL_BATCH, limit - len(letters)),
                    timeout=_PULL_TIMEOUT_S,
                )
            except gexc.DeadlineExceeded:
                break
            except gexc.NotFound as exc:
                raise BackendUnavailable(f"no dead-letter subscription {path}") from exc
            fresh = [_letter(r) for r in response.received_messages]
            fresh = [d for d in fresh if d.message_id not in letters]
            if not fresh:
                break
            for letter in fresh:
                letters[letter.message_id] = letter
            progress.advance(len(fresh))
    except BaseException:
        _release(subscriber, path, list(letters.values()))
        raise
    if letters:
        progress.finish()
    return list(letters.values())


def _check_max(limit: int) -> None:
    if limit < 1:
        raise UsageError(f"--max must be at least 1, not {limit}")


def _release(subscriber: Any, path: str, letters: list[DeadLetter]) -> None:
    """Make `letters` deliverable again right away (ack deadline 0 is a nack)."""
    for start in range(0, len(letters), _PULL_BATCH):
        batch = [d.ack_id for d in letters[start : start + _PULL_BATCH]]
        subscriber.modify_ack_deadline(subscription=path, ack_ids=batch, ack_deadline_seconds=0)


def _letter(received: Any) -> DeadLetter:
    message = received.message
    return DeadLetter(
        ack_id=received.ack_id,
        message_id=message.message_id,
        job_id=message.data.decode("utf-8", errors="replace"),
        attributes=dict(message.attributes),
        publish_time=message.publish_time,
    )


def _report(letters: list[DeadLetter], footer: str) -> Report:
    rows = [
        [
            d.job_id,
            d.job_attributes.get("generation"),
            d.delivery_count,
            d.message_id,
            d.publish_time,
        ]
        for d in letters
    ]
    text = table(["job_id", "generation", "deliveries", "message_id", "published"], rows)
    return Report(data={"dead_letters": [d.describe() for d in letters]}, text=f"{text}\n{footer}")


def _subscription_path(session: Session, flag: str | None) -> str:
    name = flag or session.env(DEAD_LETTER_SUBSCRIPTION, DEFAULT_DEAD_LETTER_SUBSCRIPTION)
    if name.startswith("projects/"):
        return name
    return f"projects/{session.backends.project}/subscriptions/{name}"


def _topic_path(session: Session, flag: str | None) -> str:
    name = flag or session.env(TOPIC, DEFAULT_TOPIC)
    if name.startswith("projects/"):
        return name
    return f"projects/{session.backends.project}/topics/{name}"
