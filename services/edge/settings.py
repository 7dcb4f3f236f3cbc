"""Reading a service's frozen Settings from `JOBS_*` environment variables, failing fast.

Each service builds its own Settings with an `EnvReader`: every accessor records what is
wrong instead of raising, and `finish()` raises one `SettingsError` naming every missing or
invalid key, so a misconfigured deployment is fixed in one round, not one key at a time.

    env = EnvReader(os.environ)
    common = CommonSettings.read(env)
    page_size = env.int("JOBS_SCAN_PAGE_SIZE", default=200, min=1, max=500)
    env.finish()

The keys both services share live in `CommonSettings`.
"""

from __future__ import annotations

import builtins
import datetime
import logging
import math
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from services.jobs.durations import DurationError, parse_duration
from services.jobs.http_targets import ENV_VARIABLE, HttpTarget, TargetsError, parse_targets
from services.jobs.shard import MAX_SHARDS
from services.jobs.transitions import DEFAULT_TERMINAL_RETENTION
from services.store.bounds import DEFAULT_CALL_TIMEOUT_S

# Where Google publishes the keys its ID tokens are signed with (JSON {kid: x509 PEM}), and the
# leeway on `iat`/`exp` the verifier allows; defined here, not in auth.py, so reading settings
# does not import google.auth.
GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
DEFAULT_CLOCK_SKEW_S = 10

PREFIX = "JOBS_"

# The keys every service shares, as the names the Pulumi program and the local stack set.
PROJECT = "JOBS_PROJECT"
LOG_LEVEL = "JOBS_LOG_LEVEL"
OIDC_CERTS_URL = "JOBS_OIDC_CERTS_URL"
AUTH_CLOCK_SKEW_S = "JOBS_AUTH_CLOCK_SKEW_S"
TERMINAL_RETENTION_S = "JOBS_TERMINAL_RETENTION_S"
FIRESTORE_TIMEOUT_S = "JOBS_FIRESTORE_TIMEOUT_S"
BEHIND_CLOUD_RUN_IAM = "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM"
# How many shards the due index has: the scan claims from each, and every producer (API,
# worker, scan) writes a new job's shard from it, so all three read the one key.
SHARDS = "JOBS_SHARDS"
COMMON_KEYS = (
    PROJECT,
    LOG_LEVEL,
    OIDC_CERTS_URL,
    AUTH_CLOCK_SKEW_S,
    TERMINAL_RETENTION_S,
    FIRESTORE_TIMEOUT_S,
    BEHIND_CLOUD_RUN_IAM,
    SHARDS,
)

# How far the scan's or the worker's clock may be from Firestore's time (a read's read_time)
# before it refuses to claim, reclaim or take a lease (docs/state-machine.md, "Clock skew").
# The scan and the worker read it; the API, jobsctl and the console fence nothing on their clock.
MAX_CLOCK_SKEW_S = "JOBS_MAX_CLOCK_SKEW_S"
DEFAULT_MAX_CLOCK_SKEW_S = 10
MIN_MAX_CLOCK_SKEW_S, MAX_MAX_CLOCK_SKEW_S = 1, 120


# The services `http.request` may call (services/jobs/http_targets.py): the worker calls them,
# and every scheduling component (api, jobsctl, the store) checks a job's target against them.
HTTP_TARGETS = ENV_VARIABLE

DEFAULT_TERMINAL_RETENTION_S = int(DEFAULT_TERMINAL_RETENTION.total_seconds())
MIN_TERMINAL_RETENTION_S, MAX_TERMINAL_RETENTION_S = 3600, 10 * 365 * 86400
DEFAULT_FIRESTORE_TIMEOUT_S = DEFAULT_CALL_TIMEOUT_S
MIN_FIRESTORE_TIMEOUT_S, MAX_FIRESTORE_TIMEOUT_S = 0.05, 120.0


class SettingsError(Exception):
    """The service settings are invalid."""

    def __init__(self, problems: Iterable[builtins.str] = ()) -> None:
        self.problems = tuple(problems)
        detail = "".join(f"\n  - {problem}" for problem in self.problems)
        super().__init__(f"{self.__doc__}{detail}")


class _Required:
    def __repr__(self) -> builtins.str:
        return "REQUIRED"


REQUIRED: Final = _Required()

T = TypeVar("T")
N = TypeVar("N", int, float)

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class EnvReader:
    """Typed accessors over an environment mapping that collect every problem.

    An empty value counts as unset. An accessor whose key is bad returns its default (or a
    zero value when required) so building can continue; `finish()` then raises.
    """

    def __init__(self, environ: Mapping[builtins.str, builtins.str]) -> None:
        self._environ = environ
        self._problems: list[builtins.str] = []

    @property
    def problems(self) -> tuple[builtins.str, ...]:
        return tuple(self._problems)

    def finish(self) -> None:
        """Raise SettingsError listing every problem recorded so far, if any."""
        if self._problems:
            raise SettingsError(self._problems)

    def problem(self, key: builtins.str, message: builtins.str) -> None:
        """Record a problem found by a check the accessors do not cover (e.g. two keys)."""
        self._problems.append(f"{key}: {message}")

    def str(self, key: builtins.str, default: builtins.str | _Required = REQUIRED) -> builtins.str:
        raw = self._raw(key)
        if raw is not None:
            return raw
        return self._missing(key, default, "")

    def choice(
        self,
        key: builtins.str,
        choices: Iterable[builtins.str],
        default: builtins.str | _Required = REQUIRED,
    ) -> builtins.str:
        """One of `choices`, matched case-insensitively and returned as spelled in `choices`."""
        options = tuple(choices)
        raw = self._raw(key)
        if raw is None:
            return self._missing(key, default, options[0])
        for option in options:
            if raw.lower() == option.lower():
                return option
        self.problem(key, f"must be one of {', '.join(options)}; got {raw!r}")
        return options[0] if isinstance(default, _Required) else default

    def int(
        self,
        key: builtins.str,
        default: builtins.int | _Required = REQUIRED,
        *,
        min: builtins.int | None = None,
        max: builtins.int | None = None,
    ) -> builtins.int:
        return self._number(key, default, 0, _parse_int, "must be an integer", min, max)

    def float(
        self,
        key: builtins.str,
        default: builtins.float | _Required = REQUIRED,
        *,
        min: builtins.float | None = None,
        max: builtins.float | None = None,
    ) -> builtins.float:
        return self._number(key, default, 0.0, _parse_float, "must be a finite number", min, max)

    def duration_s(
        self,
        key: builtins.str,
        default: builtins.float | _Required = REQUIRED,
        *,
        min: builtins.float | None = None,
        max: builtins.float | None = None,
    ) -> builtins.float:
        """Seconds, in the one duration grammar (services/jobs/durations.py): `90`, `90s`,
        `1.5m`, `1h30m`, `2w`, `500ms`."""
        raw = self._raw(key)
        if raw is None:
            return self._missing(key, default, 0.0)
        try:
            value = parse_duration(raw).total_seconds()
        except DurationError as exc:
            self.problem(key, builtins.str(exc))
            return 0.0 if isinstance(default, _Required) else default
        return self._bounded(key, value, default, 0.0, min, max)

    def bool(
        self, key: builtins.str, default: builtins.bool | _Required = REQUIRED
    ) -> builtins.bool:
        raw = self._raw(key)
        if raw is None:
            return self._missing(key, default, False)
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        self.problem(key, f"must be true/false (or 1/0, yes/no, on/off); got {raw!r}")
        return False if isinstance(default, _Required) else default

    def csv(
        self,
        key: builtins.str,
        default: tuple[builtins.str, ...] | _Required = REQUIRED,
    ) -> tuple[builtins.str, ...]:
        """Comma-separated values, stripped, blanks dropped; a value of only commas is unset."""
        raw = self._raw(key)
        items = tuple(part.strip() for part in (raw or "").split(",") if part.strip())
        if items:
            return items
        return self._missing(key, default, ())

    def url(
        self,
        key: builtins.str,
        default: builtins.str | _Required = REQUIRED,
        *,
        schemes: tuple[builtins.str, ...] = ("https", "http"),
    ) -> builtins.str:
        raw = self._raw(key)
        if raw is None:
            return self._missing(key, default, "")
        parts = urllib.parse.urlsplit(raw)
        if parts.scheme not in schemes or not parts.netloc:
            wanted = " or ".join(f"{scheme}://" for scheme in schemes)
            self.problem(key, f"must be an absolute {wanted} URL; got {raw!r}")
            return "" if isinstance(default, _Required) else default
        return raw

    def _raw(self, key: builtins.str) -> builtins.str | None:
        value = self._environ.get(key, "").strip()
        return value or None

    def _missing(self, key: builtins.str, default: T | _Required, zero: T) -> T:
        if isinstance(default, _Required):
            self.problem(key, "is required")
            return zero
        return default

    def _number(
        self,
        key: builtins.str,
        default: N | _Required,
        zero: N,
        parse: Callable[[builtins.str], N | None],
        complaint: builtins.str,
        low: N | None,
        high: N | None,
    ) -> N:
        """A number parsed from `key`'s value, within [low, high]; `complaint` if unparsable."""
        raw = self._raw(key)
        if raw is None:
            return self._missing(key, default, zero)
        value = parse(raw)
        if value is None:
            self.problem(key, f"{complaint}; got {raw!r}")
            return zero if isinstance(default, _Required) else default
        return self._bounded(key, value, default, zero, low, high)

    def _bounded(
        self,
        key: builtins.str,
        value: N,
        default: N | _Required,
        zero: N,
        low: N | None,
        high: N | None,
    ) -> N:
        if (low is not None and value < low) or (high is not None and value > high):
            self.problem(key, f"must be {_range(low, high)}; got {value}")
            return zero if isinstance(default, _Required) else default
        return value


def _parse_int(raw: builtins.str) -> builtins.int | None:
    try:
        return builtins.int(raw)
    except ValueError:
        return None


def _parse_float(raw: builtins.str) -> builtins.float | None:
    try:
        value = builtins.float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _range(low: object, high: object) -> builtins.str:
    if low is not None and high is not None:
        return f"between {low} and {high}"
    return f"at least {low}" if low is not None else f"at most {high}"


# Set by Cloud Run in every container (https://cloud.google.com/run/docs/container-contract#env-vars),
# and by the local front end in the one it runs (emulators/cloudrun/container.py).
CLOUD_RUN_SERVICE = "K_SERVICE"


def _behind_cloud_run_iam(env: EnvReader) -> builtins.bool:
    """JOBS_AUTH_BEHIND_CLOUD_RUN_IAM, refused unless the process runs on Cloud Run.

    With the flag a token without a signature is trusted (Cloud Run verified it before the
    container saw it: docs/api.md, "Trust boundary"). A process not on Cloud Run has no such
    front end, so there the flag would let anyone in with an unsigned token: the start-up check
    names both keys instead.
    """
    behind = env.bool(BEHIND_CLOUD_RUN_IAM, default=False)
    if behind and not env.str(CLOUD_RUN_SERVICE, default=""):
        env.problem(
            BEHIND_CLOUD_RUN_IAM,
            f"true, but {CLOUD_RUN_SERVICE} is not set: the process is not on Cloud Run, so no "
            "invoker check verified the unsigned tokens this flag accepts; set it only on Cloud "
            "Run (or behind the local front end, emulators/cloudrun, which sets "
            f"{CLOUD_RUN_SERVICE})",
        )
    return behind


@dataclass(frozen=True)
class CommonSettings:
    """Keys every service reads: project, log level, OIDC verification (and whether Cloud Run's
    IAM invoker check stands in front, so forwarded tokens come without their signature), how
    long terminal records are kept, and how long one Firestore call may take."""

    project: builtins.str
    log_level: builtins.str = "INFO"
    oidc_certs_url: builtins.str = GOOGLE_CERTS_URL
    auth_clock_skew_s: builtins.int = DEFAULT_CLOCK_SKEW_S
    terminal_retention_s: builtins.float = DEFAULT_TERMINAL_RETENTION_S
    firestore_timeout_s: builtins.float = DEFAULT_FIRESTORE_TIMEOUT_S
    # Whether Cloud Run's IAM invoker check stands in front of the service (the stack says so).
    behind_cloud_run_iam: builtins.bool = False
    shards: builtins.int = 1

    @classmethod
    def read(cls, env: EnvReader) -> CommonSettings:
        """Read the shared keys; problems are recorded on `env` for its `finish()`."""
        return cls(
            project=env.str(PROJECT),
            log_level=env.choice(LOG_LEVEL, LOG_LEVELS, default="INFO"),
            oidc_certs_url=env.url(OIDC_CERTS_URL, default=GOOGLE_CERTS_URL),
            auth_clock_skew_s=env.int(
                AUTH_CLOCK_SKEW_S, default=DEFAULT_CLOCK_SKEW_S, min=0, max=300
            ),
            terminal_retention_s=env.duration_s(
                TERMINAL_RETENTION_S,
                default=DEFAULT_TERMINAL_RETENTION_S,
                min=MIN_TERMINAL_RETENTION_S,
                max=MAX_TERMINAL_RETENTION_S,
            ),
            firestore_timeout_s=env.duration_s(
                FIRESTORE_TIMEOUT_S,
                default=DEFAULT_FIRESTORE_TIMEOUT_S,
                min=MIN_FIRESTORE_TIMEOUT_S,
                max=MAX_FIRESTORE_TIMEOUT_S,
            ),
            # True only where Cloud Run's IAM invoker check (or the local front end,
            # emulators/cloudrun) verified each token before the service sees it.
            behind_cloud_run_iam=_behind_cloud_run_iam(env),
            shards=env.int(SHARDS, default=1, min=1, max=MAX_SHARDS),
        )

    def as_fields(self) -> dict[builtins.str, Any]:
        """The shared keys as every service's Settings names them, to pass on as
        `cls(**common.as_fields(), ...)` instead of copying each one by hand."""
        return {
            "project": self.project,
            "log_level": self.log_level,
            "certs_url": self.oidc_certs_url,
            "auth_clock_skew_s": self.auth_clock_skew_s,
            "terminal_retention_s": self.terminal_retention_s,
            "firestore_timeout_s": self.firestore_timeout_s,
            "behind_cloud_run_iam": self.behind_cloud_run_iam,
            "shards": self.shards,
        }

    @property
    def terminal_retention(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.terminal_retention_s)

    @property
    def log_level_number(self) -> builtins.int:
        return logging.getLevelNamesMapping()[self.log_level]


def read_http_targets(env: EnvReader) -> dict[builtins.str, HttpTarget]:
    """JOBS_HTTP_TARGETS, parsed by the domain's one parser; each problem recorded on `env`,
    naming the target and field (`JOBS_HTTP_TARGETS.trials.url: …`)."""
    try:
        return parse_targets(env.str(HTTP_TARGETS, default=""))
    except TargetsError as exc:
        for problem in exc.problems:
            env.problem(HTTP_TARGETS, problem)
        return {}


def read_max_clock_skew_s(env: EnvReader) -> builtins.int:
    return env.int(
        MAX_CLOCK_SKEW_S,
        default=DEFAULT_MAX_CLOCK_SKEW_S,
        min=MIN_MAX_CLOCK_SKEW_S,
        max=MAX_MAX_CLOCK_SKEW_S,
    )
