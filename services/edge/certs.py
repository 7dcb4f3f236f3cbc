"""`CertsCache`: Google's token signing certificates (`{kid: PEM}`), fetched at most once per
the response's `Cache-Control: max-age` and served to google-auth's verifier from memory, so a
token check costs no request while the certs are fresh. Used by `auth.TokenVerifier`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

import google.auth.exceptions
import google.auth.transport
import google.auth.transport.requests

from services.edge.auth_errors import CertsUnavailable

logger = logging.getLogger(__name__)


class CertsCache:
    """Google's `{kid: PEM}` certs document, fetched at most once per TTL; thread-safe.

    The TTL is the response's `Cache-Control: max-age`, capped at `max_ttl_s`. A token signed
    by a key we do not know triggers a refresh (Google rotates keys), at most once per
    `refresh_floor_s` so garbage tokens cannot make us hammer the certs endpoint. If a refresh
    fails while older certs are held, the older certs keep serving: Google publishes a new key
    well before it signs with it.
    """

    def __init__(
        self,
        certs_url: str,
        request: google.auth.transport.Request | None = None,
        *,
        max_ttl_s: float = 3600.0,
        refresh_floor_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.certs_url = certs_url
        self._request = request or google.auth.transport.requests.Request()
        self._max_ttl_s = max_ttl_s
        self._refresh_floor_s = refresh_floor_s
        self._clock = clock
        self._lock = threading.Lock()
        self._document: bytes | None = None
        self._kids: frozenset[str] = frozenset()
        self._fetched_at = 0.0
        self._fresh_until = 0.0

    def document(self, needed_kid: str | None = None) -> bytes:
        """The certs JSON, refreshed when stale or when it lacks `needed_kid`."""
        with self._lock:
            now = self._clock()
            stale = self._document is None or now >= self._fresh_until
            unknown_key = (
                needed_kid is not None
                and needed_kid not in self._kids
                and now - self._fetched_at >= self._refresh_floor_s
            )
            if stale or unknown_key:
                self._refresh(now)
            assert self._document is not None  # _refresh sets it or raises
            return self._document

    def _refresh(self, now: float) -> None:
        try:
            document, max_age = self._fetch()
        except CertsUnavailable:
            if self._document is None:
                raise
            logger.warning("keeping cached OIDC certs: refresh from %s failed", self.certs_url)
            # Retry no sooner than the floor, so an outage is not one fetch per request.
            self._fetched_at = now
            self._fresh_until = now + self._refresh_floor_s
            return
        self._document = document
        self._kids = frozenset(json.loads(document))
        self._fetched_at = now
        ttl = self._max_ttl_s if max_age is None else min(max_age, self._max_ttl_s)
        self._fresh_until = now + ttl
        logger.info("fetched OIDC certs", extra={"fields": {"kids": sorted(self._kids)}})

    def _fetch(self) -> tuple[bytes, float | None]:
        try:
            response = self._request(self.certs_url, method="GET", timeout=10)
        except google.auth.exceptions.TransportError as exc:
            raise CertsUnavailable(f"cannot fetch OIDC certs from {self.certs_url}") from exc
        if response.status != HTTPStatus.OK:
            raise CertsUnavailable(
                f"OIDC certs at {self.certs_url} answered HTTP {response.status}"
            )
        try:
            certs = json.loads(response.data)
        except ValueError as exc:
            raise CertsUnavailable(f"OIDC certs at {self.certs_url} are not JSON") from exc
        if not isinstance(certs, dict) or not all(isinstance(v, str) for v in certs.values()):
            raise CertsUnavailable(f"OIDC certs at {self.certs_url} are not a {{kid: PEM}} map")
        return bytes(response.data), _max_age(response.headers)


def _max_age(headers: Mapping[str, str]) -> float | None:
    for name, value in headers.items():
        if name.lower() != "cache-control":
            continue
        for directive in value.split(","):
            key, _, number = directive.strip().partition("=")
            if key.lower() == "max-age" and number.isdigit():
                return float(number)
    return None


class _CachedResponse(google.auth.transport.Response):
    def __init__(self, data: bytes) -> None:
        self._data = data

    @property
    def status(self) -> int:
        return HTTPStatus.OK

    @property
    def headers(self) -> Mapping[str, str]:
        return {"Content-Type": "application/json"}

    @property
    def data(self) -> bytes:
        return self._data


class CachedCertsRequest(google.auth.transport.Request):
    """Hands `verify_token` the cached certs instead of fetching them per call."""

    def __init__(self, cache: CertsCache, needed_kid: str | None) -> None:
        self._cache = cache
        self._needed_kid = needed_kid
        self.served: bytes | None = None  # the certs document handed out, once asked

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> google.auth.transport.Response:
        if url != self._cache.certs_url or method != "GET":
            raise google.auth.exceptions.TransportError(f"unexpected request {method} {url}")
        self.served = self._cache.document(self._needed_kid)
        return _CachedResponse(self.served)
