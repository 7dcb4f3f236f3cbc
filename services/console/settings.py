"""The console's configuration: one frozen `ConsoleSettings`, read from JOBS_* variables once.

Identity comes from Identity-Aware Proxy enabled directly on the console's Cloud Run service
(https://cloud.google.com/iap/docs/enabling-cloud-run): IAP signs each request's user into the
`X-Goog-IAP-JWT-Assertion` header, and the console verifies it (services/console/identity.py)
against `JOBS_CONSOLE_IAP_AUDIENCE`, which for IAP on a Cloud Run service is
`/projects/PROJECT_NUMBER/locations/REGION/services/SERVICE_NAME`
(https://cloud.google.com/iap/docs/signed-headers-howto). Two roles from the stack: viewers
and operators (an operator may view too), by the email IAP signs. Locally (`make run`) a
stand-in identity replaces IAP; it is refused on Cloud Run (K_SERVICE set), so a deployment
can never run without the signed header's check.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from services.edge.settings import (
    CLOUD_RUN_SERVICE,
    COMMON_KEYS,
    DEFAULT_CLOCK_SKEW_S,
    DEFAULT_FIRESTORE_TIMEOUT_S,
    DEFAULT_TERMINAL_RETENTION_S,
    HTTP_TARGETS,
    CommonSettings,
    EnvReader,
    read_http_targets,
)
from services.jobs.http_targets import HttpTarget

CONSOLE_VIEWERS = "JOBS_CONSOLE_VIEWERS"
CONSOLE_OPERATORS = "JOBS_CONSOLE_OPERATORS"
CONSOLE_IAP_AUDIENCE = "JOBS_CONSOLE_IAP_AUDIENCE"
# Where IAP's public keys are: Google's by default; a test points it at a local issuer.
CONSOLE_IAP_KEYS_URL = "JOBS_CONSOLE_IAP_KEYS_URL"
CONSOLE_STAND_IN_IDENTITY = "JOBS_CONSOLE_STAND_IN_IDENTITY"
# Not read by the console: where `make run` says it serves the console (the stack's env file),
# for a shell, a browser or the browser tier.
CONSOLE_URL = "JOBS_CONSOLE_URL"
# The console's names that the stack's env file exports and no Settings reads.
EXPORT_ONLY_KEYS = (CONSOLE_URL,)

ALL_KEYS = (
    *COMMON_KEYS,
    CONSOLE_VIEWERS,
    CONSOLE_OPERATORS,
    CONSOLE_IAP_AUDIENCE,
    CONSOLE_IAP_KEYS_URL,
    CONSOLE_STAND_IN_IDENTITY,
    HTTP_TARGETS,
)

# IAP's signing keys as a {key ID: PEM} map, the form google-auth's `verify_token` reads
# (Google's own Python sample passes this URL as `certs_url`; the same keys are published as a
# JWK set at .../public_key-jwk: https://cloud.google.com/iap/docs/signed-headers-howto).
IAP_KEYS_URL = "https://www.gstatic.com/iap/verify/public_key"


@dataclass(frozen=True)
class ConsoleSettings:
    """Everything the console reads from its environment."""

    project: str
    viewers: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()
    iap_audience: str = ""
    iap_keys_url: str = IAP_KEYS_URL
    # Local only: every request is this person, no header checked (refused on Cloud Run).
    stand_in_identity: str | None = None
    certs_url: str = ""  # the shared OIDC key (unused: the console verifies IAP's JWT)
    auth_clock_skew_s: int = DEFAULT_CLOCK_SKEW_S
    log_level: str = "INFO"
    terminal_retention_s: float = DEFAULT_TERMINAL_RETENTION_S
    firestore_timeout_s: float = DEFAULT_FIRESTORE_TIMEOUT_S
    behind_cloud_run_iam: bool = False
    shards: int = 1
    http_targets: Mapping[str, HttpTarget] = dataclasses.field(default_factory=dict)

    @property
    def terminal_retention(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.terminal_retention_s)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ConsoleSettings:
        """Settings from `environ` (pass `os.environ`); SettingsError names every bad key."""
        env = EnvReader(environ)
        common = CommonSettings.read(env)
        viewers = _emails(env, CONSOLE_VIEWERS)
        operators = _emails(env, CONSOLE_OPERATORS)
        stand_in = env.str(CONSOLE_STAND_IN_IDENTITY, default="") or None
        if stand_in is not None:
            if "@" not in stand_in or " " in stand_in:
                env.problem(CONSOLE_STAND_IN_IDENTITY, f"not an email address: {stand_in!r}")
            if env.str(CLOUD_RUN_SERVICE, default=""):
                env.problem(
                    CONSOLE_STAND_IN_IDENTITY,
                    f"set, but {CLOUD_RUN_SERVICE} is set too: on Cloud Run the identity "
                    "must come from IAP's signed header, never a stand-in (make run only)",
                )
        audience = env.str(CONSOLE_IAP_AUDIENCE, default="")
        if stand_in is None and not audience:
            env.problem(
                CONSOLE_IAP_AUDIENCE,
                "required (/projects/PROJECT_NUMBER/locations/REGION/services/SERVICE_NAME) "
                f"unless {CONSOLE_STAND_IN_IDENTITY} stands in for IAP locally",
            )
        elif audience and not audience.startswith("/projects/"):
            env.problem(
                CONSOLE_IAP_AUDIENCE,
                f"must be /projects/PROJECT_NUMBER/locations/REGION/services/SERVICE_NAME; "
                f"got {audience[:80]!r}",
            )
        if not viewers and not operators and stand_in is None:
            env.problem(
                CONSOLE_OPERATORS, f"nobody may use the console: set it or {CONSOLE_VIEWERS}"
            )
        settings = cls(
            **common.as_fields(),
            viewers=frozenset(viewers),
            operators=frozenset(operators),
            iap_audience=audience,
            iap_keys_url=env.url(CONSOLE_IAP_KEYS_URL, default=IAP_KEYS_URL),
            stand_in_identity=stand_in,
            http_targets=read_http_targets(env),
        )
        env.finish()
        return settings


def _emails(env: EnvReader, key: str) -> tuple[str, ...]:
    emails = tuple(e.lower() for e in env.csv(key, default=()))
    bad = sorted(e for e in emails if "@" not in e or " " in e or ":" in e)
    if bad:
        env.problem(key, f"not email addresses (no user:/group: prefix): {', '.join(bad)}")
    return emails
