"""Resource names and the services' URLs, derived from the stack configuration.

Names are explicit (no Pulumi auto-suffix) so that alert filters, the dashboard and the
services' environment can name a resource before it exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.config import StackConfig
from infra.errors import NameTooLongError

# A DNS label is at most 63 characters; Cloud Run gives a service its deterministic URL
# (https://SERVICE-PROJECT_NUMBER.REGION.run.app) only when SERVICE-PROJECT_NUMBER fits.
_DNS_LABEL = 63


@dataclass(frozen=True)
class Names:
    """Every name the program gives a resource."""

    scan_service: str
    worker_service: str
    topic: str
    push_subscription: str
    dead_letter_topic: str
    dead_letter_subscription: str
    scheduler_job: str
    scan_account: str
    worker_account: str
    scheduler_account: str
    pusher_account: str

    @classmethod
    def for_stack(cls, config: StackConfig) -> Names:
        prefix = config.name_prefix
        return cls(
            scan_service=f"{prefix}-scan",
            worker_service=f"{prefix}-worker",
            topic=f"{prefix}-jobs",
            push_subscription=f"{prefix}-jobs-push",
            dead_letter_topic=f"{prefix}-dead-letter",
            dead_letter_subscription=f"{prefix}-dead-letter-pull",
            scheduler_job=f"{prefix}-scan",
            scan_account=f"{prefix}-scan-rt",
            worker_account=f"{prefix}-worker-rt",
            scheduler_account=f"{prefix}-scheduler",
            pusher_account=f"{prefix}-pusher",
        )


def service_url(service: str, project_number: str, region: str) -> str:
    """The deterministic run.app URL of a Cloud Run service, known before the service exists.

    The services need their own URL as the expected OIDC audience; the deterministic form breaks
    the cycle "the service's environment needs the service's URL".
    """
    label = f"{service}-{project_number}"
    if len(label) > _DNS_LABEL:
        raise NameTooLongError(
            f"service name {service!r} is too long for a deterministic URL "
            f"({len(label)} > {_DNS_LABEL} characters with the project number); shorten namePrefix"
        )
    return f"https://{label}.{region}.run.app"
