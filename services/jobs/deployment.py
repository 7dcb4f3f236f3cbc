"""What a deployment configures that checking a job's params may need: its HTTP targets.

An action's params schema may carry a check that depends on the deployment, not only on the
params (`http.request` refuses a target the deployment does not name). Every scheduling
component and the worker build one `Deployment` from their own environment (`jobsctl` and the
Python store with `Deployment.from_env`; the API, the worker and the scan from their Settings,
`services.edge.settings.read_http_targets`; both parse `JOBS_HTTP_TARGETS` with the one parser,
`http_targets.parse_targets`) and hand it to the catalogue (`load_catalogue(deployment=…)`),
which passes it to those checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.jobs.http_targets import ENV_VARIABLE, HttpTarget, parse_targets


@dataclass(frozen=True)
class Deployment:
    """The deployment's configuration a params check may read. Empty: nothing configured
    (an `http.request` job is then refused: no target is known)."""

    http_targets: Mapping[str, HttpTarget] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Deployment:
        """From `environ` (`JOBS_HTTP_TARGETS`); TargetsError names every problem."""
        return cls(http_targets=parse_targets(environ.get(ENV_VARIABLE)))
