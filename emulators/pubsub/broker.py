"""The in-memory heart of the emulator: topics, subscriptions, leases, redelivery, dead letters.

Every message published to a topic becomes one entry in each subscription attached to it. An
entry is READY (waiting for a puller or the pusher), LEASED (delivered; its ack ID is live until
the lease ends) or WAITING (nacked, sitting out its retry backoff). One timer thread turns
expired leases into failures and finished backoffs into READY entries; pullers, streams and the
pusher wait on a condition variable, so nothing polls.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from emulators import snapshot
from emulators.journal import Journal
from emulators.pubsub import limits, names, protos
from emulators.pubsub.exceptions import AlreadyExists, InvalidArgument, NotFound
from emulators.pubsub.stats import Stats

logger = logging.getLogger(__name__)

# Push requests time out at the ack deadline; the lease lasts a little longer so that the HTTP
# outcome, not a race with the timer, decides whether the attempt failed.
PUSH_LEASE_GRACE_S = 5.0


class _State(enum.Enum):
    READY = "ready"
    LEASED = "leased"
    WAITING = "waiting"


@dataclass(eq=False)
class _Entry:
    """One message inside one subscription."""

    message: Any
    published_at: float
    attempts: int = 0
    # +1 on every lease; an ack ID names one generation, so a stale modify is ignored.
    generation: int = 0
    state: _State = _State.READY
    due: float = 0.0
    owner: object | None = None


@dataclass(eq=False)
class _Subscription:
    config: Any
    # Unique per created subscription: ack IDs carry it, so an ack ID is worthless on another
    # subscription or on a deleted-and-recreated one of the same name.
    serial: int
    entries: dict[str, _Entry] = field(default_factory=dict)
    ready: deque[str] = field(default_factory=deque)
    push_in_flight: int = 0

    @property
    def name(self) -> str:
        return str(self.config.name)

    @property
    def is_push(self) -> bool:
        return bool(self.config.push_config.push_endpoint)


@dataclass(frozen=True)
class PushDelivery:
    """One leased message on its way to a push endpoint."""

    subscription: str
    push_config: Any
    message: Any
    ack_id: str
    delivery_attempt: int | None
    timeout_s: float
    _state: _Subscription


def _ack_id(serial: int, message_id: str, generation: int) -> str:
    return f"{serial}-{message_id}-{generation}"


def _parse_ack_id(ack_id: str) -> tuple[int, str, int]:
    parts = ack_id.split("-")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise InvalidArgument(
            f"You have passed an invalid ack ID to the service (ack_id={ack_id})."
        )
    return int(parts[0]), parts[1], int(parts[2])


class Broker:
    """All Pub/Sub state of one emulator; thread-safe, every public method takes the lock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ready_cv = threading.Condition(self._lock)
        self._timer_cv = threading.Condition(self._lock)
        self._topics: dict[str, Any] = {}
        self._topic_subs: dict[str, set[str]] = {}
        self._subs: dict[str, _Subscription] = {}
        self._timers: list[tuple[float, int, str, str, int]] = []
        self._timer_seq = itertools.count()
        # The next message ID: never handed out twice, a restart included (production IDs are
        # unique per topic, and the project keys `rejected` documents on them), so the
        # snapshot keeps it even when no message that carried an ID is left.
        self._next_message_id = 1
        self._sub_serials = itertools.count(1)
        self._owners: Counter[object] = Counter()
        self._owner_bytes: Counter[object] = Counter()
        self._push_total = 0
        self._closed = False
        self.stats = Stats()
        # With a data directory: every change is logged before it is applied and on disk
        # before it is answered or a message is handed out (emulators/journal.py).
        self.journal: Journal | None = None
        self._compact_after = False
        self._timer_thread = threading.Thread(
            target=self._run_timers, name="pubsub-broker-timers", daemon=True
        )
        self._timer_thread.start()

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._ready_cv.notify_all()
            self._timer_cv.notify_all()
        self._timer_thread.join(timeout=5)

    @property
    def closed(self) -> bool:
        return self._closed

    def reset(self) -> None:
        """Forget every topic, subscription, message and counter."""
        with self._lock:
            self._log({"op": "reset"})
            self._reset()
        self._settle()

    def _reset(self) -> None:
        self._topics.clear()
        self._topic_subs.clear()
        self._subs.clear()
        self._timers.clear()
        self._owners.clear()
        self._owner_bytes.clear()
        self.stats = Stats()
        self._ready_cv.notify_all()

    # -- persistence ----------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """Topics, subscriptions and every unacknowledged message with its delivery count.

        Leases and backoffs are not kept: after a restart every unacknowledged message is
        ready for delivery again, as an expired lease would make it in production.
        """
        with self._lock:
            return self._export()

    def _export(self) -> dict[str, Any]:
        now = self._clock()
        subscriptions = []
        for state in self._subs.values():
            entries = sorted(state.entries.values(), key=lambda e: int(e.message.message_id))
            messages = [
                [snapshot.encode(e.message), e.attempts, max(0.0, now - e.published_at)]
                for e in entries
            ]
            subscriptions.append({"config": snapshot.encode(state.config), "messages": messages})
        return {
            "topics": [snapshot.encode(t) for t in self._topics.values()],
            "subscriptions": subscriptions,
            "next_message_id": self._next_message_id,
        }

    def replay(self, record: dict[str, Any]) -> None:
        """Apply one logged change (a list of ``ops``, as the methods below log them)."""
        with self._lock:
            try:
                for op in record["ops"]:
                    self._replay(op)
            except (KeyError, TypeError, ValueError, DecodeError) as exc:
                raise snapshot.SnapshotError(
                    f"malformed Pub/Sub log record {record.get('seq')}: {exc!r}"
                ) from exc
            self._ready_cv.notify_all()

    def _replay(self, op: dict[str, Any]) -> None:
        kind = op["op"]
        if kind == "reset":
            self._reset()
        elif kind == "topic":
            topic = snapshot.decode(protos.Topic, op["topic"])
            self._topics[topic.name] = topic
            self._topic_subs[topic.name] = set()
        elif kind == "del_topic":
            self._delete_topic(str(op["name"]))
        elif kind == "sub":
            config = snapshot.decode(protos.Subscription, op["config"])
            self._subs[config.name] = _Subscription(config, next(self._sub_serials))
            self._topic_subs.setdefault(config.topic, set()).add(config.name)
        elif kind == "sub_config":
            config = snapshot.decode(protos.Subscription, op["config"])
            self._subs[config.name].config = config
        elif kind == "del_sub":
            self._delete_subscription(str(op["name"]))
        elif kind == "publish":
            messages = [snapshot.decode(protos.PubsubMessage, m) for m in op["messages"]]
            self._place(str(op["topic"]), messages)
            top = max((int(m.message_id) for m in messages), default=0)
            self._next_message_id = max(self._next_message_id, top + 1)
        elif kind in ("ack", "drop"):
            entries = self._entries_of(str(op["sub"]))
            for message_id in op["ids"]:
                entry = entries.pop(str(message_id), None)
                if entry is not None:
                    self._end_lease(entry)
        elif kind == "attempts":
            entries = self._entries_of(str(op["sub"]))
            for message_id, attempts in op["ids"]:
                entry = entries.get(str(message_id))
                if entry is not None:
                    entry.attempts = max(entry.attempts, int(attempts))
        else:
            raise ValueError(f"unknown op {kind!r}")

    def _entries_of(self, name: str) -> dict[str, _Entry]:
        state = self._subs.get(name)
        return state.entries if state is not None else {}

    def checkpoint(self) -> None:
        """Fold the log into a new snapshot now."""
        if self.journal is not None:
            with self._lock:
                self.journal.compact(self._export())

    def _log(self, *ops: dict[str, Any]) -> None:
        """Log one change (lock held), before it is applied."""
        if self.journal is not None and self.journal.append({"ops": list(ops)}):
            self._compact_after = True

    def _settle(self) -> None:
        """Wait until every change logged so far is on disk (lock NOT held)."""
        if self.journal is not None:
            if self._compact_after:
                with self._lock:
                    if self._compact_after:
                        self._compact_after = False
                        self.journal.compact(self._export())
            self.journal.settle()

    def import_state(self, state: dict[str, Any]) -> int:
        """Load what :meth:`export_state` saved (into an empty broker); the messages loaded."""
        now = self._clock()
        count = 0
        last_id = 0
        with self._lock:
            try:
                for encoded in state["topics"]:
                    topic = snapshot.decode(protos.Topic, encoded)
                    self._topics[topic.name] = topic
                    self._topic_subs[topic.name] = set()
                for saved in state["subscriptions"]:
                    config = snapshot.decode(protos.Subscription, saved["config"])
                    sub = _Subscription(config, next(self._sub_serials))
                    self._subs[config.name] = sub
                    if config.topic in self._topic_subs:
                        self._topic_subs[config.topic].add(config.name)
                    for encoded, attempts, age_s in saved["messages"]:
                        message = snapshot.decode(protos.PubsubMessage, encoded)
                        sub.entries[message.message_id] = _Entry(
                            message, now - float(age_s), attempts=int(attempts)
                        )
                        sub.ready.append(message.message_id)
                        last_id = max(last_id, int(message.message_id))
                        count += 1
            except (KeyError, TypeError, ValueError, DecodeError) as exc:
                raise snapshot.SnapshotError(f"malformed Pub/Sub state: {exc!r}") from exc
            # A snapshot from before the high-water mark was kept has only its messages' IDs.
            saved_next = state.get("next_message_id", 1)
            if not isinstance(saved_next, int) or saved_next < 1:
                raise snapshot.SnapshotError(f"bad next_message_id {saved_next!r}")
            self._next_message_id = max(last_id + 1, saved_next)
            self._ready_cv.notify_all()
        return count

    def oldest_unacked_publish_times(self) -> dict[str, float | None]:
        """Each subscription's oldest unacked message's publish time (wall-clock seconds), or
        None when it holds none: what Pub/Sub's `subscription/oldest_unacked_message_age`
        metric is sampled from (emulators/monitoring). A message leased, nacked or waiting
        out a backoff is unacked; an acked, expired or dead-lettered one is gone."""
        with self._lock:
            return {
                name: min(
                    (e.message.publish_time.ToNanoseconds() / 1e9 for e in sub.entries.values()),
                    default=None,
                )
                for name, sub in self._subs.items()
            }

    def stats_snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.stats.snapshot()

    def clear_stats(self) -> None:
        with self._lock:
            self.stats = Stats()

    def wake(self) -> None:
        """Make every waiter re-check its condition (a stream closed, say)."""
        with self._lock:
            self._ready_cv.notify_all()

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, topic: Any) -> Any:
        names.topic(topic.name)
        with self._lock:
            if topic.name in self._topics:
                raise AlreadyExists("Topic already exists")
            stored = protos.Topic()
            stored.CopyFrom(topic)
            self._log({"op": "topic", "topic": snapshot.encode(stored)})
            self._topics[topic.name] = stored
            self._topic_subs[topic.name] = set()
        self._settle()
        return stored

    def get_topic(self, name: str) -> Any:
        names.topic(name)
        with self._lock:
            return self._require_topic(name)

    def list_topics(self, project: str) -> list[Any]:
        prefix = f"projects/{project}/topics/"
        with self._lock:
            return [t for n, t in sorted(self._topics.items()) if n.startswith(prefix)]

    def list_topic_subscriptions(self, name: str) -> list[str]:
        names.topic(name)
        with self._lock:
            self._require_topic(name)
            return sorted(self._topic_subs[name])

    def delete_topic(self, name: str) -> None:
        names.topic(name)
        with self._lock:
            self._require_topic(name)
            self._log({"op": "del_topic", "name": name})
            self._delete_topic(name)
        self._settle()

    def _delete_topic(self, name: str) -> None:
        del self._topics[name]
        for sub_name in self._topic_subs.pop(name):
            # Configs are replaced, never mutated: a response may be serializing the old one.
            state = self._subs[sub_name]
            detached = protos.Subscription()
            detached.CopyFrom(state.config)
            detached.topic = protos.DELETED_TOPIC
            state.config = detached

    def publish(self, topic: str, messages: Iterable[Any]) -> list[str]:
        names.topic(topic)
        batch = list(messages)
        limits.check_publish(batch)
        with self._lock:
            self._require_topic(topic)
            ids = self._publish_locked(topic, batch)
        self._settle()
        return ids

    # -- subscriptions --------------------------------------------------------------------

    def create_subscription(self, subscription: Any) -> Any:
        names.subscription(subscription.name)
        names.topic(subscription.topic)
        config = protos.Subscription()
        config.CopyFrom(subscription)
        with self._lock:
            if config.name in self._subs:
                raise AlreadyExists("Subscription already exists")
            self._require_topic(config.topic)
            self._normalize(config)
            self._log({"op": "sub", "config": snapshot.encode(config)})
            self._subs[config.name] = _Subscription(config, next(self._sub_serials))
            self._topic_subs[config.topic].add(config.name)
        self._settle()
        return config

    def get_subscription(self, name: str) -> Any:
        names.subscription(name)
        with self._lock:
            return self._require_sub(name).config

    def update_subscription(self, subscription: Any, paths: list[str]) -> Any:
        names.subscription(subscription.name)
        if not paths:
            raise InvalidArgument("The update_mask in the UpdateSubscriptionRequest is empty.")
        with self._lock:
            state = self._require_sub(subscription.name)
            updated = protos.Subscription()
            updated.CopyFrom(state.config)
            for path in paths:
                top = path.split(".")[0]
                if top in ("name", "topic") or top not in updated.DESCRIPTOR.fields_by_name:
                    raise InvalidArgument(f"Invalid update_mask provided: {path}")
                descriptor = updated.DESCRIPTOR.fields_by_name[top]
                if descriptor.message_type is not None and not descriptor.is_repeated:
                    if subscription.HasField(top):
                        getattr(updated, top).CopyFrom(getattr(subscription, top))
                    else:
                        updated.ClearField(top)
                elif descriptor.is_repeated:
                    updated.ClearField(top)
                    field_value = getattr(subscription, top)
                    target = getattr(updated, top)
                    if hasattr(field_value, "items"):
                        target.update(field_value)
                    else:
                        target.extend(field_value)
                else:
                    setattr(updated, top, getattr(subscription, top))
            self._normalize(updated)
            self._log({"op": "sub_config", "config": snapshot.encode(updated)})
            state.config = updated
            self._ready_cv.notify_all()
        self._settle()
        return updated

    def list_subscriptions(self, project: str) -> list[Any]:
        prefix = f"projects/{project}/subscriptions/"
        with self._lock:
            return [s.config for n, s in sorted(self._subs.items()) if n.startswith(prefix)]

    def delete_subscription(self, name: str) -> None:
        names.subscription(name)
        with self._lock:
            self._require_sub(name)
            self._log({"op": "del_sub", "name": name})
            self._delete_subscription(name)
        self._settle()

    def _delete_subscription(self, name: str) -> None:
        state = self._subs.get(name)
        if state is not None:
            for entry in state.entries.values():
                self._end_lease(entry)
            del self._subs[name]
            self._topic_subs.get(state.config.topic, set()).discard(name)
            self._ready_cv.notify_all()

    def modify_push_config(self, name: str, push_config: Any) -> None:
        names.subscription(name)
        with self._lock:
            state = self._require_sub(name)
            updated = protos.Subscription()
            updated.CopyFrom(state.config)
            updated.push_config.CopyFrom(push_config)
            self._normalize(updated)
            self._log({"op": "sub_config", "config": snapshot.encode(updated)})
            state.config = updated
            self._ready_cv.notify_all()
        self._settle()

    # -- delivery -------------------------------------------------------------------------

    def pull(self, name: str, max_messages: int, wait_s: float) -> list[Any]:
        """Lease up to `max_messages`, waiting up to `wait_s` for the first one."""
        names.subscription(name)
        if max_messages <= 0:
            raise InvalidArgument("max_messages must be greater than 0.")
        max_messages = min(max_messages, limits.MAX_PUBLISH_MESSAGES)
        end = self._clock() + wait_s
        with self._lock:
            while True:
                state = self._require_sub(name)
                got = self._lease_ready(state, max_messages, state.config.ack_deadline_seconds)
                remaining = end - self._clock()
                if got or remaining <= 0 or self._closed:
                    break
                self._ready_cv.wait(remaining)
        self._settle()  # a message is handed out only once it and its attempt are on disk
        return got

    def lease_for_stream(
        self,
        name: str,
        owner: object,
        deadline_s: int,
        max_outstanding: int,
        wait_s: float,
        is_done: Callable[[], bool],
        max_outstanding_bytes: int = 0,
    ) -> list[Any] | None:
        """Messages for one StreamingPull; [] after `wait_s` idle, None once the stream is over.

        Like production, the stream's flow control (`max_outstanding_messages` / `_bytes` of its
        first request) bounds how much it holds unacknowledged.
        """
        end = self._clock() + wait_s
        with self._lock:
            while True:
                if self._closed or is_done():
                    return None
                state = self._require_sub(name)
                room = limits.MAX_PUBLISH_MESSAGES
                if max_outstanding > 0:
                    room = min(room, max_outstanding - self._owners[owner])
                if max_outstanding_bytes > 0 and self._owner_bytes[owner] >= max_outstanding_bytes:
                    room = 0
                if room > 0:
                    got = self._lease_ready(state, room, deadline_s, owner)
                    if got:
                        break
                remaining = end - self._clock()
                if remaining <= 0:
                    return []
                self._ready_cv.wait(remaining)
        self._settle()
        return got

    def release_owner(self, owner: object) -> None:
        """A stream ended: its leases stay (they expire as production's do) but stop counting."""
        with self._lock:
            for state in self._subs.values():
                for entry in state.entries.values():
                    if entry.owner is owner:
                        entry.owner = None
            self._owners.pop(owner, None)
            self._owner_bytes.pop(owner, None)

    def acknowledge(self, name: str, ack_ids: Iterable[str]) -> None:
        names.subscription(name)
        parsed = [_parse_ack_id(a) for a in ack_ids]
        with self._lock:
            state = self._require_sub(name)
            if any(serial != state.serial for serial, _, _ in parsed):
                # An ack ID this subscription never issued (another subscription's) is
                # malformed for it: production refuses the request with this message (seen in
                # https://github.com/googleapis/google-cloud-dotnet/pull/8287), as Google's
                # emulator refuses it; only an expired one of its own is acknowledged quietly.
                raise InvalidArgument(
                    "Some acknowledgement ids in the request were invalid. This could be "
                    "because the acknowledgement ids have expired or the acknowledgement ids "
                    "were malformed."
                )
            # Best effort, like production: a late ack of an expired lease still removes it.
            removed = [
                message_id
                for _serial, message_id, _generation in parsed
                if message_id in state.entries
            ]
            if removed:
                self._log({"op": "ack", "sub": name, "ids": removed})
            for message_id in removed:
                entry = state.entries.pop(message_id, None)
                if entry is not None:
                    self._end_lease(entry)
                    self.stats.acknowledged += 1
            self._ready_cv.notify_all()
        self._settle()

    def modify_ack_deadline(self, name: str, ack_ids: Iterable[str], seconds: int) -> None:
        names.subscription(name)
        limits.check_modify_deadline(seconds)
        parsed = [_parse_ack_id(a) for a in ack_ids]
        with self._lock:
            state = self._require_sub(name)
            now = self._clock()
            for serial, message_id, generation in parsed:
                entry = state.entries.get(message_id) if serial == state.serial else None
                if entry is None or entry.generation != generation:
                    continue
                if entry.state is not _State.LEASED:
                    continue
                if seconds == 0:
                    self.stats.nacked += 1
                    self._fail(state, entry, now)
                else:
                    entry.due = now + seconds
                    self._add_timer(entry.due, state.name, message_id, generation)
            self._ready_cv.notify_all()
        self._settle()

    def take_push_work(
        self, max_per_subscription: int, max_total: int, wait_s: float
    ) -> list[PushDelivery] | None:
        """Lease messages of push subscriptions within the concurrency limits; None once closed."""
        with self._lock:
            while not self._closed:
                work: list[PushDelivery] = []
                for state in list(self._subs.values()):
                    if state.is_push:
                        self._take_push_for(state, max_per_subscription, max_total, work)
                if work:
                    break
                self._ready_cv.wait(wait_s)
            else:
                return None
        self._settle()  # pushed only once the message and its attempt are on disk
        return work

    def finish_push(self, delivery: PushDelivery, acked: bool, outcome: str) -> None:
        with self._lock:
            self.stats.push_attempts_by_status[outcome] += 1
            delivery._state.push_in_flight -= 1
            self._push_total -= 1
            state = self._subs.get(delivery.subscription)
            if state is delivery._state:
                _serial, message_id, generation = _parse_ack_id(delivery.ack_id)
                entry = state.entries.get(message_id)
                if entry is not None and entry.generation == generation:
                    if acked:
                        self._log({"op": "ack", "sub": state.name, "ids": [message_id]})
                        del state.entries[message_id]
                        self._end_lease(entry)
                        self.stats.acknowledged += 1
                    elif entry.state is _State.LEASED:
                        self.stats.nacked += 1
                        self._fail(state, entry, self._clock())
            self._ready_cv.notify_all()
        self._settle()

    # -- internals (lock held) ------------------------------------------------------------

    def _require_topic(self, name: str) -> Any:
        topic = self._topics.get(name)
        if topic is None:
            raise NotFound(f"Resource not found (resource={name.rsplit('/', 1)[-1]}).")
        return topic

    def _require_sub(self, name: str) -> _Subscription:
        state = self._subs.get(name)
        if state is None:
            raise NotFound(f"Resource not found (resource={name.rsplit('/', 1)[-1]}).")
        return state

    def _normalize(self, config: Any) -> None:
        """Apply production defaults and refuse what production refuses."""
        if config.ack_deadline_seconds == 0:
            config.ack_deadline_seconds = limits.DEFAULT_ACK_DEADLINE_S
        limits.check_ack_deadline(config.ack_deadline_seconds)
        if not config.HasField("message_retention_duration"):
            config.message_retention_duration.seconds = limits.DEFAULT_RETENTION_S
        limits.check_retention(limits.seconds(config.message_retention_duration))
        if not config.HasField("expiration_policy"):
            config.expiration_policy.ttl.seconds = limits.DEFAULT_EXPIRATION_TTL_S
        if config.HasField("retry_policy"):
            policy = config.retry_policy
            if not policy.HasField("minimum_backoff"):
                policy.minimum_backoff.seconds = int(limits.DEFAULT_MIN_BACKOFF_S)
            if not policy.HasField("maximum_backoff"):
                policy.maximum_backoff.seconds = int(limits.DEFAULT_MAX_BACKOFF_S)
            limits.check_backoff(
                limits.seconds(policy.minimum_backoff), limits.seconds(policy.maximum_backoff)
            )
        if config.HasField("dead_letter_policy"):
            policy = config.dead_letter_policy
            names.topic(policy.dead_letter_topic)
            if policy.dead_letter_topic not in self._topics:
                # "The operation will fail if the topic does not exist" (DeadLetterPolicy,
                # google.pubsub.v1); NOT_FOUND as Google's emulator answers.
                raise NotFound(
                    f"Dead letter topic not found: the topic {policy.dead_letter_topic} does "
                    "not exist."
                )
            if policy.max_delivery_attempts == 0:
                policy.max_delivery_attempts = limits.DEFAULT_DELIVERY_ATTEMPTS
            limits.check_delivery_attempts(policy.max_delivery_attempts)
        push = config.push_config
        if push.push_endpoint:
            limits.check_push_endpoint(push.push_endpoint)
            if push.HasField("oidc_token") and not push.oidc_token.service_account_email:
                raise InvalidArgument("oidc_token.service_account_email is required.")
        elif push.HasField("oidc_token") or push.HasField("no_wrapper"):
            raise InvalidArgument("A push_endpoint is required with oidc_token or no_wrapper.")
        if config.filter:
            raise InvalidArgument("Subscription filters are not supported by this emulator.")
        config.state = protos.SUBSCRIPTION_ACTIVE

    def _publish_locked(
        self, topic: str, messages: list[Any], also: tuple[dict[str, Any], ...] = ()
    ) -> list[str]:
        """Publish (lock held); ``also``: ops logged in the same record (a dead letter's
        removal from its source, so the log never has one without the other)."""
        wall = time.time()
        batch = []
        for message in messages:
            stored = protos.PubsubMessage()
            stored.CopyFrom(message)
            stored.message_id = str(self._next_message_id)
            self._next_message_id += 1
            stored.publish_time.FromNanoseconds(int(wall * 1e9))
            batch.append(stored)
        encoded = [snapshot.encode(m) for m in batch] if self.journal is not None else []
        self._log(*also, {"op": "publish", "topic": topic, "messages": encoded})
        self._place(topic, batch, self._clock())
        self.stats.published += len(messages)
        return [m.message_id for m in batch]

    def _place(self, topic: str, messages: list[Any], now: float | None = None) -> None:
        """Put published messages into every subscription of ``topic`` (lock held)."""
        subs = [self._subs[n] for n in sorted(self._topic_subs.get(topic, ()))]
        wall = time.time()
        for stored in messages:
            if now is None:  # replayed: as old as its publish time says
                published_at = self._clock() - max(0.0, wall - stored.publish_time.ToSeconds())
            else:
                published_at = now
            # Stored messages are never mutated, so every subscription shares one object.
            for state in subs:
                state.entries[stored.message_id] = _Entry(stored, published_at)
                state.ready.append(stored.message_id)
        if subs and messages:
            self._ready_cv.notify_all()

    def _lease_ready(
        self, state: _Subscription, count: int, deadline_s: float, owner: object | None = None
    ) -> list[Any]:
        now = self._clock()
        retention = limits.seconds(state.config.message_retention_duration)
        with_attempts = state.config.HasField("dead_letter_policy")
        leased: list[Any] = []
        size = 0
        while state.ready and len(leased) < count:
            message_id = state.ready[0]
            entry = state.entries.get(message_id)
            if entry is None or entry.state is not _State.READY:
                state.ready.popleft()
                continue
            if now - entry.published_at > retention:
                state.ready.popleft()
                del state.entries[message_id]
                continue
            message_size = entry.message.ByteSize()
            if leased and size + message_size > limits.MAX_RESPONSE_BYTES:
                break
            state.ready.popleft()
            size += message_size
            leased.append(self._lease(state, message_id, entry, now + deadline_s, owner))
            if with_attempts:
                leased[-1].delivery_attempt = entry.attempts
        if leased and self.journal is not None:
            # Delivery counts survive a restart (they decide dead-lettering).
            counts = [
                [r.message.message_id, state.entries[r.message.message_id].attempts] for r in leased
            ]
            self._log({"op": "attempts", "sub": state.name, "ids": counts})
        return leased

    def _lease(
        self, state: _Subscription, message_id: str, entry: _Entry, due: float, owner: object
    ) -> Any:
        entry.attempts += 1
        entry.generation += 1
        entry.state = _State.LEASED
        entry.due = due
        if owner is not None:
            entry.owner = owner
            self._owners[owner] += 1
            self._owner_bytes[owner] += entry.message.ByteSize()
        self._add_timer(due, state.name, message_id, entry.generation)
        self.stats.delivered += 1
        if entry.attempts > 1:
            self.stats.redelivered += 1
        received = protos.ReceivedMessage()
        received.ack_id = _ack_id(state.serial, message_id, entry.generation)
        received.message.CopyFrom(entry.message)
        return received

    def _take_push_for(
        self, state: _Subscription, max_per_sub: int, max_total: int, work: list[PushDelivery]
    ) -> None:
        config = state.config
        timeout = float(config.ack_deadline_seconds)
        while state.ready and state.push_in_flight < max_per_sub and self._push_total < max_total:
            leased = self._lease_ready(state, 1, timeout + PUSH_LEASE_GRACE_S)
            if not leased:
                return
            received = leased[0]
            state.push_in_flight += 1
            self._push_total += 1
            attempt = received.delivery_attempt if config.HasField("dead_letter_policy") else None
            work.append(
                PushDelivery(
                    subscription=state.name,
                    push_config=config.push_config,
                    message=received.message,
                    ack_id=received.ack_id,
                    delivery_attempt=attempt,
                    timeout_s=timeout,
                    _state=state,
                )
            )

    def _end_lease(self, entry: _Entry) -> None:
        if entry.owner is not None:
            self._owners[entry.owner] -= 1
            self._owner_bytes[entry.owner] -= entry.message.ByteSize()
            entry.owner = None

    def _fail(self, state: _Subscription, entry: _Entry, now: float) -> None:
        """A delivery attempt failed (nack or expired lease): back off, or dead-letter."""
        self._end_lease(entry)
        message_id = entry.message.message_id
        config = state.config
        if (
            config.HasField("dead_letter_policy")
            and entry.attempts >= config.dead_letter_policy.max_delivery_attempts
            and self._dead_letter(state, entry)
        ):
            return
        wait = 0.0
        if config.HasField("retry_policy"):
            policy = config.retry_policy
            wait = limits.backoff_s(
                entry.attempts,
                limits.seconds(policy.minimum_backoff),
                limits.seconds(policy.maximum_backoff),
            )
        elif state.is_push:
            # Production's push backoff: a failing endpoint is not retried in a tight loop.
            wait = limits.backoff_s(
                entry.attempts, limits.PUSH_BACKOFF_MIN_S, limits.PUSH_BACKOFF_MAX_S
            )
        if wait <= 0:
            entry.state = _State.READY
            state.ready.append(message_id)
            self._ready_cv.notify_all()
        else:
            entry.state = _State.WAITING
            entry.due = now + wait
            self._add_timer(entry.due, state.name, message_id, entry.generation)

    def _dead_letter(self, state: _Subscription, entry: _Entry) -> bool:
        topic = state.config.dead_letter_policy.dead_letter_topic
        if topic not in self._topics:
            # Production keeps retrying when it cannot forward; so do we.
            return False
        source = names.subscription(state.name)
        forwarded = protos.PubsubMessage()
        forwarded.data = entry.message.data
        forwarded.attributes.update(entry.message.attributes)
        forwarded.ordering_key = entry.message.ordering_key
        forwarded.attributes.update(
            {
                "CloudPubSubDeadLetterSourceDeliveryCount": str(entry.attempts),
                "CloudPubSubDeadLetterSourceSubscription": source.resource_id,
                "CloudPubSubDeadLetterSourceSubscriptionProject": source.project,
                "CloudPubSubDeadLetterSourceTopicPublishTime": (
                    entry.message.publish_time.ToJsonString()
                ),
            }
        )
        drop = {"op": "drop", "sub": state.name, "ids": [entry.message.message_id]}
        self._publish_locked(topic, [forwarded], also=(drop,))
        del state.entries[entry.message.message_id]
        self.stats.dead_lettered += 1
        logger.debug("dead-lettered %s from %s", entry.message.message_id, state.name)
        return True

    def _add_timer(self, due: float, sub_name: str, message_id: str, generation: int) -> None:
        earliest = self._timers[0][0] if self._timers else None
        heapq.heappush(self._timers, (due, next(self._timer_seq), sub_name, message_id, generation))
        if earliest is None or due < earliest:
            self._timer_cv.notify()

    def _run_timers(self) -> None:
        with self._lock:
            while not self._closed:
                now = self._clock()
                while self._timers and self._timers[0][0] <= now:
                    _due, _seq, sub_name, message_id, generation = heapq.heappop(self._timers)
                    self._fire(sub_name, message_id, generation, now)
                timeout = self._timers[0][0] - now if self._timers else None
                self._timer_cv.wait(timeout)

    def _fire(self, sub_name: str, message_id: str, generation: int, now: float) -> None:
        state = self._subs.get(sub_name)
        entry = state.entries.get(message_id) if state is not None else None
        if state is None or entry is None or entry.generation != generation or entry.due > now:
            return
        if entry.state is _State.LEASED:
            self.stats.expired += 1
            self._fail(state, entry, now)
        elif entry.state is _State.WAITING:
            entry.state = _State.READY
            state.ready.append(message_id)
            self._ready_cv.notify_all()
