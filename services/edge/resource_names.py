"""Resource names: the Pub/Sub topics and subscriptions, service accounts and Cloud Run
services a deployment's prefix gives, the way `infra.names.Names.for_stack` derives them.

Here, below both, because the local stack (`services/local`) and the CLI (`services/cli`) need
the same names and the CLI must not import the local stack. `infra/` needs Pulumi, an optional
dependency, so its names are mirrored here; a test proves they agree.
"""

from __future__ import annotations

from dataclasses import dataclass

NAME_PREFIX = "deferred-jobs"


@dataclass(frozen=True)
class Names:
    """Resource IDs and service-account emails, as infra derives them from the prefix."""

    topic: str
    push_subscription: str
    dead_letter_topic: str
    dead_letter_subscription: str
    scheduler_account: str
    pusher_account: str
    scan_service: str
    worker_service: str
    scheduler_job: str

    @classmethod
    def for_prefix(cls, prefix: str = NAME_PREFIX) -> Names:
        return cls(
            topic=f"{prefix}-jobs",
            push_subscription=f"{prefix}-jobs-push",
            dead_letter_topic=f"{prefix}-dead-letter",
            dead_letter_subscription=f"{prefix}-dead-letter-pull",
            scheduler_account=f"{prefix}-scheduler",
            pusher_account=f"{prefix}-pusher",
            scan_service=f"{prefix}-scan",
            worker_service=f"{prefix}-worker",
            scheduler_job=f"{prefix}-scan",
        )

    def email(self, account: str, project: str) -> str:
        return f"{account}@{project}.iam.gserviceaccount.com"
