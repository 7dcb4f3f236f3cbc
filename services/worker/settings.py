"""The worker's configuration: one frozen `WorkerSettings`, read from JOBS_* variables once.

The variable names are module constants so the Pulumi program sets exactly what this reads.
`from_env` names every missing or invalid key in one `SettingsError`, so a bad deploy fails at
start with the whole list, not one key per restart.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from services.edge.settings import (
    COMMON_KEYS,
    DEFAULT_CLOCK_SKEW_S,
    DEFAULT_FIRESTORE_TIMEOUT_S,
    DEFAULT_MAX_CLOCK_SKEW_S,
    DEFAULT_TERMINAL_RETENTION_S,
    GOOGLE_CERTS_URL,
    HTTP_TARGETS,
    MAX_CLOCK_SKEW_S,
    CommonSettings,
    EnvReader,
    read_http_targets,
    read_max_clock_skew_s,
)
from services.jobs.actions import (
    DEFAULT_LONG_RETRY_DELAY,
    DEFAULT_RETRY_LATER_AFTER_ATTEMPTS,
    RetryPolicy,
)
from services.jobs.http_targets import HttpTarget
from services.worker.media import is_valid_bucket_name
from services.worker.processor import DEFAULT_DEADLINE_MARGIN, DEFAULT_MAX_DELIVERY

# The worker's own (the shared ones are services.edge.settings', read through CommonSettings).
WORKER_AUDIENCE = "JOBS_WORKER_AUDIENCE"
WORKER_ALLOWED_INVOKERS = "JOBS_WORKER_ALLOWED_INVOKERS"
WORKER_LEASE_S = "JOBS_WORKER_LEASE_S"
RETRY_LATER_DELAY_S = "JOBS_RETRY_LATER_DELAY_S"
WORKER_RETRY_LATER_AFTER_ATTEMPTS = "JOBS_WORKER_RETRY_LATER_AFTER_ATTEMPTS"
MEDIA_BUCKET = "JOBS_MEDIA_BUCKET"
# How long before the lease's end an action stops between units of work.
WORKER_DEADLINE_MARGIN_S = "JOBS_WORKER_DEADLINE_MARGIN_S"
# The longest one delivery acts before handing what is left to the next; set it below the
# Cloud Run request timeout (which does not stop the thread).
WORKER_MAX_DELIVERY_S = "JOBS_WORKER_MAX_DELIVERY_S"
# TEST SETTINGS (make run): where the worker takes its ID tokens for http.request's targets
# (the local OIDC issuer's token endpoint) and the account they name. Unset: the metadata
# server, as the worker's own service account (Cloud Run).
WORKER_ID_TOKEN_URL = "JOBS_WORKER_ID_TOKEN_URL"
WORKER_ID_TOKEN_EMAIL = "JOBS_WORKER_ID_TOKEN_EMAIL"

ALL_KEYS = (
    *COMMON_KEYS,
    WORKER_AUDIENCE,
    WORKER_ALLOWED_INVOKERS,
    WORKER_LEASE_S,
    RETRY_LATER_DELAY_S,
    WORKER_RETRY_LATER_AFTER_ATTEMPTS,
    MEDIA_BUCKET,
    WORKER_DEADLINE_MARGIN_S,
    WORKER_MAX_DELIVERY_S,
    HTTP_TARGETS,
    WORKER_ID_TOKEN_URL,
    WORKER_ID_TOKEN_EMAIL,
    MAX_CLOCK_SKEW_S,
)

# The lease must end before Pub/Sub's push deadline (at most 600 s) hands the message to
# another delivery; the infra sets the ack deadline above the lease.
DEFAULT_LEASE_S = 60
MIN_LEASE_S, MAX_LEASE_S = 5, 600
# A push envelope carries a job's ID (base64) and a few attributes, never its params: a fixed
# cap, not a variable, since no deployment needs another.
DEFAULT_MAX_BODY_BYTES = 64 * 1024
# Pub/Sub's dead-letter limit is 5 to 100 deliveries; the threshold must sit below it.
MAX_RETRY_LATER_AFTER_ATTEMPTS = 99
MIN_RETRY_LATER_DELAY_S = 60
DEFAULT_DEADLINE_MARGIN_S = int(DEFAULT_DEADLINE_MARGIN.total_seconds())
DEFAULT_MAX_DELIVERY_S = int(DEFAULT_MAX_DELIVERY.total_seconds())
MAX_MAX_DELIVERY_S = 3600  # Cloud Run's longest request timeout
MAX_RETRY_LATER_DELAY_S = 10 * 365 * 86400


@dataclass(frozen=True)
class WorkerSettings:
    """Everything the worker reads from its environment."""

    project: str
    audience: str
    allowed_invokers: frozenset[str]
    certs_url: str = GOOGLE_CERTS_URL
    lease_s: int = DEFAULT_LEASE_S
    retry_later_delay_s: int = int(DEFAULT_LONG_RETRY_DELAY.total_seconds())
    retry_later_after_attempts: int = DEFAULT_RETRY_LATER_AFTER_ATTEMPTS
    media_bucket: str | None = None
    http_targets: Mapping[str, HttpTarget] = dataclasses.field(default_factory=dict)
    # None: ID tokens from the metadata server; else the local OIDC issuer's token URL and
    # the email its tokens name (make run).
    id_token_url: str | None = None
    id_token_email: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_level: str = "INFO"
    auth_clock_skew_s: int = DEFAULT_CLOCK_SKEW_S
    terminal_retention_s: float = DEFAULT_TERMINAL_RETENTION_S
    firestore_timeout_s: float = DEFAULT_FIRESTORE_TIMEOUT_S
    behind_cloud_run_iam: bool = False
    # JOBS_SHARDS: the due index\'s shard count (services/jobs/shard.py).
    shards: int = 1
    deadline_margin_s: int = DEFAULT_DEADLINE_MARGIN_S
    max_delivery_s: int = DEFAULT_MAX_DELIVERY_S
    # JOBS_MAX_CLOCK_SKEW_S: a start on a clock further from Firestore's is refused (503), so
    # it never takes over a live lease (docs/state-machine.md, "Clock skew").
    max_clock_skew_s: int = DEFAULT_MAX_CLOCK_SKEW_S

    @property
    def deadline_margin(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.deadline_margin_s)

    @property
    def max_delivery(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.max_delivery_s)

    @property
    def terminal_retention(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.terminal_retention_s)

    @property
    def max_clock_skew(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.max_clock_skew_s)

    @property
    def lease(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.lease_s)

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retry policy the built-in actions get."""
        return RetryPolicy(
            long_retry_delay=datetime.timedelta(seconds=self.retry_later_delay_s),
            retry_later_after_attempts=self.retry_later_after_attempts,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> WorkerSettings:
        """Settings from `environ` (pass `os.environ`); SettingsError names every bad key."""
        env = EnvReader(environ)
        common = CommonSettings.read(env)
        invokers = env.csv(WORKER_ALLOWED_INVOKERS)
        bad_emails = sorted(e for e in invokers if "@" not in e or " " in e)
        if bad_emails:
            env.problem(WORKER_ALLOWED_INVOKERS, f"not email addresses: {', '.join(bad_emails)}")
        bucket = env.str(MEDIA_BUCKET, default="") or None
        if bucket is not None and not is_valid_bucket_name(bucket):
            env.problem(MEDIA_BUCKET, f"not a valid bucket name: {bucket!r}")
        lease_s = env.int(WORKER_LEASE_S, default=DEFAULT_LEASE_S, min=MIN_LEASE_S, max=MAX_LEASE_S)
        # Below a third of the lease: a heartbeat (every lease/3) must come before the stop.
        margin_s = env.int(
            WORKER_DEADLINE_MARGIN_S,
            default=min(DEFAULT_DEADLINE_MARGIN_S, lease_s // 3 - 1),
            min=0,
            max=max(lease_s // 3 - 1, 0),
        )
        settings = cls(
            **common.as_fields(),
            audience=env.url(WORKER_AUDIENCE),
            allowed_invokers=frozenset(invokers),
            lease_s=lease_s,
            deadline_margin_s=margin_s,
            max_delivery_s=env.int(
                WORKER_MAX_DELIVERY_S, default=DEFAULT_MAX_DELIVERY_S, min=1, max=MAX_MAX_DELIVERY_S
            ),
            retry_later_delay_s=env.int(
                RETRY_LATER_DELAY_S,
                default=int(DEFAULT_LONG_RETRY_DELAY.total_seconds()),
                min=MIN_RETRY_LATER_DELAY_S,
                max=MAX_RETRY_LATER_DELAY_S,
            ),
            retry_later_after_attempts=env.int(
                WORKER_RETRY_LATER_AFTER_ATTEMPTS,
                default=DEFAULT_RETRY_LATER_AFTER_ATTEMPTS,
                min=1,
                max=MAX_RETRY_LATER_AFTER_ATTEMPTS,
            ),
            media_bucket=bucket,
            http_targets=read_http_targets(env),
            id_token_url=env.url(WORKER_ID_TOKEN_URL, default="") or None,
            id_token_email=_id_token_email(env),
            max_clock_skew_s=read_max_clock_skew_s(env),
        )
        env.finish()
        return settings


def _id_token_email(env: EnvReader) -> str | None:
    email = env.str(WORKER_ID_TOKEN_EMAIL, default="") or None
    if email is not None and ("@" not in email or " " in email):
        env.problem(WORKER_ID_TOKEN_EMAIL, f"not an email address: {email!r}")
    if bool(email) != bool(env.str(WORKER_ID_TOKEN_URL, default="")):
        env.problem(
            WORKER_ID_TOKEN_EMAIL,
            f"set both {WORKER_ID_TOKEN_URL} and {WORKER_ID_TOKEN_EMAIL}, or neither",
        )
    return email
