"""Push delivery: POSTs leased messages to push endpoints, OIDC-signed, and reports the outcome.

The envelope, headers and success codes are production's. A bounded number of requests per
subscription are in flight at once, so a slow endpoint is not flooded.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol
from urllib.parse import urlsplit

from emulators.pubsub import limits
from emulators.pubsub.broker import Broker, PushDelivery

logger = logging.getLogger(__name__)

# Tokens are reused while fresh, as Google does, so minting is not on every request's path.
_TOKEN_LIFETIME_S = 3600
_TOKEN_REUSE_S = 3000


class TokenMinter(Protocol):
    def mint(self, audience: str, email: str) -> str: ...


class Pusher:
    """Background agent: takes push work from the broker and delivers it over HTTP."""

    def __init__(
        self,
        broker: Broker,
        issuer: TokenMinter,
        max_per_subscription: int = limits.DEFAULT_PUSH_CONCURRENCY,
        max_total: int = 64,
    ) -> None:
        if max_per_subscription < 1:
            raise ValueError("max_push_concurrency must be at least 1")
        self._broker = broker
        self._issuer = issuer
        self._max_per_subscription = max_per_subscription
        self._max_total = max(max_total, max_per_subscription)
        self._executor = ThreadPoolExecutor(self._max_total, thread_name_prefix="pubsub-push")
        self._local = threading.local()
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}
        self._tokens_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="pubsub-pusher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """The broker must be closed first; in-flight requests are abandoned, not awaited."""
        self._thread.join(timeout=5)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while True:
            work = self._broker.take_push_work(self._max_per_subscription, self._max_total, 1.0)
            if work is None:
                return
            for delivery in work:
                self._executor.submit(self._deliver, delivery)

    def _deliver(self, delivery: PushDelivery) -> None:
        acked, outcome = False, "error"
        try:
            acked, outcome = self._post(delivery)
        except Exception:
            logger.exception("push to %s failed", delivery.push_config.push_endpoint)
        finally:
            self._broker.finish_push(delivery, acked, outcome)

    def _post(self, delivery: PushDelivery) -> tuple[bool, str]:
        config = delivery.push_config
        body, headers = self._request_for(delivery)
        if config.HasField("oidc_token"):
            audience = config.oidc_token.audience or config.push_endpoint
            token = self._token(audience, config.oidc_token.service_account_email)
            headers["Authorization"] = f"Bearer {token}"
        return self._send(config.push_endpoint, body, headers, delivery.timeout_s)

    def _send(
        self, url: str, body: bytes, headers: dict[str, str], timeout_s: float
    ) -> tuple[bool, str]:
        """POST over a kept-alive connection of this thread; (acked, outcome for the stats)."""
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for _try in range(2):
            connection, was_open = self._connection(parts.scheme, parts.netloc, timeout_s)
            try:
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
            except TimeoutError:
                self._drop(parts.scheme, parts.netloc)
                return False, "timeout"
            except (OSError, http.client.HTTPException):
                self._drop(parts.scheme, parts.netloc)
                if was_open:
                    # A kept-alive connection the endpoint had closed: retry once on a new one.
                    continue
                return False, "connection_error"
            if response.will_close:
                self._drop(parts.scheme, parts.netloc)
            return response.status in limits.PUSH_SUCCESS_STATUSES, str(response.status)
        return False, "connection_error"

    def _connection(
        self, scheme: str, netloc: str, timeout_s: float
    ) -> tuple[http.client.HTTPConnection, bool]:
        connections: dict[tuple[str, str], http.client.HTTPConnection] = self._connections()
        connection = connections.get((scheme, netloc))
        if connection is not None and connection.sock is not None:
            connection.sock.settimeout(timeout_s)
            connection.timeout = timeout_s
            return connection, True
        factory = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        connection = factory(netloc, timeout=timeout_s)
        connections[(scheme, netloc)] = connection
        return connection, False

    def _drop(self, scheme: str, netloc: str) -> None:
        connection = self._connections().pop((scheme, netloc), None)
        if connection is not None:
            connection.close()

    def _connections(self) -> dict[tuple[str, str], http.client.HTTPConnection]:
        connections: dict[tuple[str, str], http.client.HTTPConnection] | None = getattr(
            self._local, "connections", None
        )
        if connections is None:
            connections = {}
            self._local.connections = connections
        return connections

    def _request_for(self, delivery: PushDelivery) -> tuple[bytes, dict[str, str]]:
        config = delivery.push_config
        message = delivery.message
        if config.HasField("no_wrapper"):
            headers = {"Content-Type": "application/octet-stream"}
            if config.no_wrapper.write_metadata:
                headers.update(
                    {
                        "x-goog-pubsub-subscription-name": delivery.subscription,
                        "x-goog-pubsub-message-id": message.message_id,
                        "x-goog-pubsub-publish-time": message.publish_time.ToJsonString(),
                    }
                )
                if message.ordering_key:
                    headers["x-goog-pubsub-ordering-key"] = message.ordering_key
                headers.update(dict(message.attributes))
            return bytes(message.data), headers
        return envelope(delivery), {"Content-Type": "application/json"}

    def _token(self, audience: str, email: str) -> str:
        key = (audience, email)
        now = time.time()
        with self._tokens_lock:
            cached = self._tokens.get(key)
            if cached is not None and cached[1] > now:
                return cached[0]
        token = self._issuer.mint(audience, email)
        with self._tokens_lock:
            self._tokens[key] = (token, now + _TOKEN_REUSE_S)
        return token


def envelope(delivery: PushDelivery) -> bytes:
    """The JSON body production POSTs to a wrapped push endpoint."""
    message: Any = delivery.message
    publish_time = message.publish_time.ToJsonString()
    body: dict[str, Any] = {}
    # Like production's proto3 JSON mapping, empty data and attributes are left out.
    if message.data:
        body["data"] = base64.b64encode(message.data).decode("ascii")
    if message.attributes:
        body["attributes"] = dict(message.attributes)
    body.update(
        {
            "messageId": message.message_id,
            "message_id": message.message_id,
            "publishTime": publish_time,
            "publish_time": publish_time,
        }
    )
    payload: dict[str, Any] = {"message": body, "subscription": delivery.subscription}
    if message.ordering_key:
        payload["message"]["orderingKey"] = message.ordering_key
    if delivery.delivery_attempt is not None:
        payload["deliveryAttempt"] = delivery.delivery_attempt
    return json.dumps(payload).encode("utf-8")
