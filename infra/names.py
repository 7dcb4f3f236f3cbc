"""The services' URLs, derived from the stack configuration before the services exist.

Resource names themselves are services/edge/resource_names.py's (`Names.for_prefix(
config.name_prefix)`), the definition the local stack and jobsctl use too. They are explicit (no
Pulumi auto-suffix) so that alert filters, the dashboard and the services' environment can name a
resource before it exists.
"""

from __future__ import annotations

from infra.errors import NameTooLongError

# A DNS label is at most 63 characters; Cloud Run gives a service its deterministic URL
# (https://SERVICE-PROJECT_NUMBER.REGION.run.app) only when SERVICE-PROJECT_NUMBER fits.
_DNS_LABEL = 63


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
