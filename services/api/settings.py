"""The API's configuration: one frozen `ApiSettings`, read from JOBS_* variables once.

The variable names are module constants (and `ALL_KEYS`) so the Pulumi program sets exactly
what this reads. `from_env` names every missing or invalid key in one `SettingsError`.
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
    DEFAULT_TERMINAL_RETENTION_S,
    GOOGLE_CERTS_URL,
    HTTP_TARGETS,
    CommonSettings,
    EnvReader,
    read_http_targets,
)
from services.jobs.http_targets import HttpTarget

# The API's own (the shared ones are services.edge.settings', read through CommonSettings).
API_AUDIENCE = "JOBS_API_AUDIENCE"
API_ALLOWED_CALLERS = "JOBS_API_ALLOWED_CALLERS"
# Callers that may act on every job, not only those they scheduled (services/api/ownership.py).
API_TRUSTED_CALLERS = "JOBS_API_TRUSTED_CALLERS"

ALL_KEYS = (
    *COMMON_KEYS,
    API_AUDIENCE,
    API_ALLOWED_CALLERS,
    API_TRUSTED_CALLERS,
    HTTP_TARGETS,
)

# A schedule request is at most a 1,500-byte ID, a 1 KiB subject and 16 KiB of params (see
# services/jobs/model.py); 64 KiB leaves room for JSON escaping without inviting megabytes.
# A fixed cap, not a variable: those limits are the domain's, so no deployment needs another.
DEFAULT_MAX_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class ApiSettings:
    """Everything the API reads from its environment."""

    project: str
    audience: str
    allowed_callers: frozenset[str]
    certs_url: str = GOOGLE_CERTS_URL
    auth_clock_skew_s: int = DEFAULT_CLOCK_SKEW_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_level: str = "INFO"
    terminal_retention_s: float = DEFAULT_TERMINAL_RETENTION_S
    firestore_timeout_s: float = DEFAULT_FIRESTORE_TIMEOUT_S
    # Cloud Run's IAM invoker check stands in front (the stack says so): forwarded tokens
    # arrive with their signature removed by Google, and only then are they accepted.
    behind_cloud_run_iam: bool = False
    # JOBS_SHARDS: the due index\'s shard count (services/jobs/shard.py).
    shards: int = 1
    # JOBS_API_TRUSTED_CALLERS: may act on every job (a subset of allowed_callers).
    trusted_callers: frozenset[str] = frozenset()
    # JOBS_HTTP_TARGETS: an http.request job must name one of them (checked when scheduled).
    http_targets: Mapping[str, HttpTarget] = dataclasses.field(default_factory=dict)

    @property
    def terminal_retention(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.terminal_retention_s)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ApiSettings:
        """Settings from `environ` (pass `os.environ`); SettingsError names every bad key."""
        env = EnvReader(environ)
        common = CommonSettings.read(env)
        callers = env.csv(API_ALLOWED_CALLERS)
        bad = sorted(e for e in callers if "@" not in e or " " in e)
        if bad:
            env.problem(API_ALLOWED_CALLERS, f"not email addresses: {', '.join(bad)}")
        trusted = env.csv(API_TRUSTED_CALLERS, default=())
        stranger = sorted(set(trusted) - set(callers))
        if stranger:
            env.problem(
                API_TRUSTED_CALLERS,
                f"not in {API_ALLOWED_CALLERS}: {', '.join(stranger)} (a trusted caller must "
                "be an allowed one)",
            )
        settings = cls(
            **common.as_fields(),
            audience=env.url(API_AUDIENCE),
            allowed_callers=frozenset(callers),
            trusted_callers=frozenset(trusted),
            http_targets=read_http_targets(env),
        )
        env.finish()
        return settings
