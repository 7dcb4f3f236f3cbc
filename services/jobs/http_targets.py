"""HTTP targets: the services in any language that the built-in `http.request` action calls.

A target is named in the deployment (the stack's `httpTargets`, the environment's
`JOBS_HTTP_TARGETS`, JSON `{"name": {"url": …, "audience": …, "rate": …, "concurrency": …,
"timeout_s": …}}`); a job names a target and a path, never a URL, so nothing a producer writes
can point the worker at another host (no scheme, host, user info, `..` segment or `//` can come
from a job). What a target answers decides the job (docs/actions.md, "The response contract"):

- 2xx: done; a bounded excerpt of the body is kept in the result;
- 429 or 503 with `Retry-After` (seconds or an HTTP date, RFC 9110 section 10.2.3): tried again
  after that, within [MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S];
- any other 5xx (and 429/503 without `Retry-After`), a timeout or a connection error: transient;
- any other status (4xx, and 3xx: redirects are not followed): permanent.

Standard library only: the schedule side (store, API, jobsctl) checks params with it, the
worker calls with it.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from services.jobs.lanes import MAX_PAUSE, MIN_PAUSE

ENV_VARIABLE = "JOBS_HTTP_TARGETS"

TARGET_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET")
DEFAULT_METHOD = "POST"
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 600.0
MAX_PATH_BYTES = 2048
MAX_BODY_BYTES = 64 * 1024
# What of a 2xx answer's body the result keeps: enough to read, bounded for the record.
RESULT_EXCERPT_BYTES = 512
# The scan's pause bounds (lanes.py): what the worker waits is what the scan pauses for.
MIN_RETRY_AFTER_S = MIN_PAUSE.total_seconds()
MAX_RETRY_AFTER_S = MAX_PAUSE.total_seconds()
# Plain http only to this machine (a local target under `make run`); anything else is https.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# RFC 3986 path characters (pchar) and "/" plus a query; "%" only as a valid escape.
_PATH_CHARS = re.compile(r"^[A-Za-z0-9\-._~!$&'()*+,;=:@%/?]*$")
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class TargetsError(ValueError):
    """The HTTP targets configuration is invalid."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class HttpTarget:
    """One named service the worker may call."""

    name: str
    url: str  # https://host[:port][/base], no query, no fragment, no user info
    audience: str  # the ID token's `aud`: for Cloud Run, the service's URL
    rate: float | None = None  # the claims budget for this target's jobs (jobs/s), None: none
    concurrency: int | None = None  # calls in flight per worker instance, None: no own limit
    timeout_s: float = DEFAULT_TIMEOUT_S

    def url_for(self, path: str) -> str:
        """The URL a job's (already checked) path names under this target."""
        return self.url.rstrip("/") + path


def parse_targets(text: str | None, *, source: str = ENV_VARIABLE) -> dict[str, HttpTarget]:
    """The targets in `text` (JSON); every problem named by its field, all at once."""
    if text is None or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TargetsError([f"{source}: not JSON ({exc.msg} at {exc.pos})"]) from exc
    return targets_from_mapping(raw, source=source)


def targets_json(targets: Mapping[str, HttpTarget]) -> str:
    """`targets` as `JOBS_HTTP_TARGETS` JSON (what `parse_targets` reads back as equal)."""
    encoded: dict[str, dict[str, Any]] = {}
    for name, target in targets.items():
        fields: dict[str, Any] = {"url": target.url, "audience": target.audience}
        if target.rate is not None:
            fields["rate"] = target.rate
        if target.concurrency is not None:
            fields["concurrency"] = target.concurrency
        fields["timeout_s"] = target.timeout_s
        encoded[name] = fields
    return json.dumps(encoded, separators=(",", ":"), sort_keys=True)


def target_flag(text: str) -> dict[str, HttpTarget]:
    """One `NAME=URL` (a command line's target: audience the URL's origin, no rate, the
    default timeout) as targets; TargetsError names what is wrong."""
    name, equals, url = text.partition("=")
    if not equals:
        raise TargetsError([f"{text!r}: expected NAME=URL"])
    return targets_from_mapping({name.strip(): {"url": url.strip()}}, source="--http-target")


def targets_from_mapping(raw: Any, *, source: str = ENV_VARIABLE) -> dict[str, HttpTarget]:
    if not isinstance(raw, Mapping):
        raise TargetsError([f"{source}: expected an object of target name → settings"])
    problems: list[str] = []
    targets: dict[str, HttpTarget] = {}
    for name, settings in raw.items():
        target = _target(name, settings, f"{source}.{name}", problems)
        if target is not None:
            targets[name] = target
    if problems:
        raise TargetsError(problems)
    return targets


def _target(name: Any, settings: Any, where: str, problems: list[str]) -> HttpTarget | None:
    before = len(problems)
    if not isinstance(name, str) or not TARGET_NAME.match(name):
        problems.append(f"{where}: a target name is lowercase letters, digits and '-'")
    if not isinstance(settings, Mapping):
        problems.append(f"{where}: expected an object with at least 'url'")
        return None
    unknown = set(settings) - {"url", "audience", "rate", "concurrency", "timeout_s"}
    if unknown:
        problems.append(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    url = settings.get("url")
    url_problem = target_url_problem(url)
    if url_problem:
        problems.append(f"{where}.url: {url_problem}")
    audience = settings.get("audience")
    if audience is None and not url_problem:
        parts = urllib.parse.urlsplit(str(url))
        audience = f"{parts.scheme}://{parts.netloc}"
    if not isinstance(audience, str) or not audience:
        problems.append(f"{where}.audience: expected a non-empty string")
    rate = settings.get("rate")
    if rate is not None and not _positive_number(rate):
        problems.append(f"{where}.rate: expected a positive number of jobs per second")
    concurrency = settings.get("concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        problems.append(f"{where}.concurrency: expected a whole number of at least 1")
    timeout_s = settings.get("timeout_s", DEFAULT_TIMEOUT_S)
    if not _positive_number(timeout_s) or float(timeout_s) > MAX_TIMEOUT_S:
        problems.append(f"{where}.timeout_s: expected seconds in (0, {MAX_TIMEOUT_S:g}]")
    if len(problems) > before:
        return None
    return HttpTarget(
        name=name,
        url=str(url),
        audience=str(audience),
        rate=float(rate) if rate is not None else None,
        concurrency=concurrency,
        timeout_s=float(timeout_s),
    )


def _positive_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def target_url_problem(url: Any) -> str | None:
    """Why `url` cannot be a target's base URL, or None."""
    if not isinstance(url, str) or not url:
        return "expected a URL string"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        return "expected an https:// URL with a host"
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        return "plain http is allowed only to this machine (127.0.0.1, localhost); use https"
    if parts.username is not None or parts.password is not None:
        return "user info is not allowed in a target URL"
    if parts.query or parts.fragment:
        return "a target URL has no query or fragment; jobs name the path"
    return None


def path_problem(path: Any) -> str | None:
    """Why a job's `path` cannot be called under a target, or None (no SSRF: the path can only
    name something below the target's own URL)."""
    if not isinstance(path, str) or not path.startswith("/"):
        return "expected a path starting with '/'"
    if len(path.encode()) > MAX_PATH_BYTES:
        return f"longer than {MAX_PATH_BYTES} bytes"
    if path.startswith("//"):
        return "must not start with '//' (that would name another host)"
    if not _PATH_CHARS.match(path):
        return "only URL path characters (RFC 3986) are allowed; percent-encode the rest"
    if _ESCAPE.search(path):
        return "'%' must start a two-digit hex escape"
    route = path.split("?", 1)[0]
    decoded = urllib.parse.unquote(route)
    if "\\" in decoded or any(ord(c) < 0x20 or ord(c) == 0x7F for c in decoded):
        return "no backslash or control character, even percent-encoded"
    if any(segment in {".", ".."} for segment in decoded.split("/")):
        return "no '.' or '..' segments, even percent-encoded"
    if "//" in decoded:
        return "no empty segments ('//'), even percent-encoded"
    return None


def request_params_problems(
    params: Mapping[str, Any], targets: Mapping[str, HttpTarget]
) -> list[str]:
    """The problems of an `http.request` job's params, each naming its field."""
    problems = []
    unknown = set(params) - {"target", "path", "method", "body"}
    if unknown:
        problems.append(f"params: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    target = params.get("target")
    if not isinstance(target, str) or not target:
        problems.append("params.target: expected the name of an HTTP target")
    elif target not in targets:
        known = ", ".join(sorted(targets)) or "none configured (JOBS_HTTP_TARGETS)"
        problems.append(f"params.target: unknown target {target!r} (known: {known})")
    path_error = path_problem(params.get("path"))
    if path_error:
        problems.append(f"params.path: {path_error}")
    method = params.get("method", DEFAULT_METHOD)
    if method not in METHODS:
        problems.append(f"params.method: expected one of {', '.join(METHODS)}")
    if "body" in params:
        if method == "GET":
            problems.append("params.body: a GET request carries no body")
        elif len(json.dumps(params["body"]).encode()) > MAX_BODY_BYTES:
            problems.append(f"params.body: larger than {MAX_BODY_BYTES} bytes as JSON")
    return problems


Verdict = Literal["done", "retry_after", "transient", "permanent"]


@dataclass(frozen=True)
class Answer:
    """What a target's answer means for the job."""

    verdict: Verdict
    retry_after_s: float | None = None


def judge(status: int, retry_after: str | None, now: datetime) -> Answer:
    """The response contract, in one place."""
    if 200 <= status < 300:
        return Answer("done")
    if status in {429, 503}:
        delay = retry_after_seconds(retry_after, now)
        if delay is not None:
            return Answer("retry_after", delay)
        return Answer("transient")
    if 500 <= status < 600:
        return Answer("transient")
    return Answer("permanent")


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """`Retry-After` as seconds from `now`, bounded; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        seconds = float(int(text))
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - now).total_seconds()
    return min(max(seconds, MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S)


def excerpt(body: bytes) -> str:
    """A bounded, printable excerpt of an answer's body for the job's result."""
    text = body[:RESULT_EXCERPT_BYTES].decode("utf-8", errors="replace")
    return text + ("…" if len(body) > RESULT_EXCERPT_BYTES else "")
