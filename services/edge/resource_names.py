"""Resource names: the Pub/Sub topics and subscriptions, service accounts, Cloud Run services
and the Cloud Scheduler job a deployment's name prefix gives.

The one definition: the Pulumi program names what it creates with it (infra/program.py,
`Names.for_prefix(config.name_prefix)`), the local stack (`services/local`) builds the same
topology, and the CLI (`services/cli`) finds the topics it replays to. Here, below all three,
because the CLI must import neither the local stack nor `infra/` (which needs Pulumi).
"""

from __future__ import annotations

from dataclasses import dataclass

NAME_PREFIX = "deferred-jobs"


@dataclass(frozen=True)
class Names:
    """Every name a deployment gives a resource, from its prefix (the stack's `namePrefix`)."""

    topic: str
    push_subscription: str
    dead_letter_topic: str
    dead_letter_subscription: str
    scheduler_account: str
    pusher_account: str
    scan_account: str
    worker_account: str
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
            scan_account=f"{prefix}-scan-rt",
            worker_account=f"{prefix}-worker-rt",
            scan_service=f"{prefix}-scan",
            worker_service=f"{prefix}-worker",
            scheduler_job=f"{prefix}-scan",
        )

    def email(self, account: str, project: str) -> str:
        return f"{account}@{project}.iam.gserviceaccount.com"
