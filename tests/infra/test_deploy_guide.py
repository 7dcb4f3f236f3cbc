"""docs/deploy.md's deployer roles cover every kind of resource the stack creates, including
the IAM bindings (which Editor cannot set), and the procedure orders its steps for a fresh
project."""

from __future__ import annotations

import re

import pytest

from tests.infra.conftest import ROOT, StackRun, run_stack

GUIDE = (ROOT / "docs" / "deploy.md").read_text()

# The predefined role that lets the deployer create (and, for a binding, set the IAM policy
# of) each resource type; https://cloud.google.com/iam/docs/understanding-roles.
ROLE_FOR_TYPE = {
    "gcp:projects/service:Service": "roles/serviceusage.serviceUsageAdmin",
    "gcp:projects/serviceIdentity:ServiceIdentity": "roles/serviceusage.serviceUsageAdmin",
    "gcp:projects/iAMMember:IAMMember": "roles/resourcemanager.projectIamAdmin",
    "gcp:projects/iAMCustomRole:IAMCustomRole": "roles/iam.roleAdmin",
    "gcp:serviceaccount/account:Account": "roles/iam.serviceAccountAdmin",
    "gcp:serviceaccount/iAMMember:IAMMember": "roles/iam.serviceAccountAdmin",
    "gcp:storage/bucketIAMMember:BucketIAMMember": "roles/storage.admin",
    "gcp:firestore/database:Database": "roles/datastore.owner",
    "gcp:firestore/index:Index": "roles/datastore.owner",
    "gcp:firestore/field:Field": "roles/datastore.owner",
    "gcp:firestore/backupSchedule:BackupSchedule": "roles/datastore.owner",
    "gcp:cloudrunv2/service:Service": "roles/run.admin",
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember": "roles/run.admin",
    "gcp:pubsub/topic:Topic": "roles/pubsub.admin",
    "gcp:pubsub/subscription:Subscription": "roles/pubsub.admin",
    "gcp:pubsub/topicIAMMember:TopicIAMMember": "roles/pubsub.admin",
    "gcp:pubsub/subscriptionIAMMember:SubscriptionIAMMember": "roles/pubsub.admin",
    "gcp:cloudscheduler/job:Job": "roles/cloudscheduler.admin",
    "gcp:monitoring/metricDescriptor:MetricDescriptor": "roles/monitoring.editor",
    "gcp:monitoring/notificationChannel:NotificationChannel": "roles/monitoring.editor",
    "gcp:monitoring/alertPolicy:AlertPolicy": "roles/monitoring.editor",
    "gcp:monitoring/dashboard:Dashboard": "roles/monitoring.editor",
    "gcp:logging/metric:Metric": "roles/logging.configWriter",
    "time:index/sleep:Sleep": "",  # local to the Pulumi engine: no Google permission
    "gcp:iap/webCloudRunServiceIamMember:WebCloudRunServiceIamMember": "roles/iap.admin",
    # On the billing account, not the project: granted apart from the loop (step 1).
    "gcp:billing/budget:Budget": "",
}
# Attaching a service account (Cloud Run runtime, scheduler and push OIDC) is actAs on it.
ACTS_AS = "roles/iam.serviceAccountUser"


def _deployer_roles() -> set[str]:
    section = GUIDE.split("### 1. Roles for the person who deploys")[1].split("### 2.")[0]
    return set(re.findall(r"^\| `(roles/[\w.]+)` \|", section, re.MULTILINE))


def test_the_guide_lists_a_role_for_every_resource_type_the_stack_creates(
    stack: StackRun,
) -> None:
    with_slack = run_stack("dev", overrides={"slackChannel": "#x"}, secrets={"slackAuthToken": "t"})
    with_all = run_stack(
        "prod",
        overrides={
            "consoleOperators": ["user:oncall@acme-media.com"],
            "budgetAmount": 200,
            "billingAccount": "01ABCD-23EF45-6789AB",
        },
    )
    types = {r.type for r in [*stack.resources, *with_slack.resources, *with_all.resources]}
    unknown = types - set(ROLE_FOR_TYPE)
    assert not unknown, f"no deployer role known for {sorted(unknown)}"
    roles = _deployer_roles()
    for typ in types:
        if ROLE_FOR_TYPE[typ]:
            assert ROLE_FOR_TYPE[typ] in roles, typ
    assert ACTS_AS in roles
    # The budget's role is the billing account's; the guide names it beside the loop.
    assert "roles/billing.costsManager" in GUIDE.split("### 1.")[1].split("### 2.")[0]


def test_the_deployer_needs_neither_owner_nor_editor() -> None:
    roles = _deployer_roles()
    assert not roles & {"roles/owner", "roles/editor"}
    # The grant loop in the guide grants exactly the table's roles.
    loop = GUIDE.split("for role in ")[1].split("; do")[0].replace("\\\n", " ").split()
    assert {f"roles/{r}" for r in loop} == roles


def _procedure_commands() -> list[str]:
    """The shell lines of the procedure's code blocks, in order, continuations joined."""
    procedure = GUIDE.split("## The procedure on a fresh project")[1].split("## Configuration")[0]
    blocks = re.findall(r"```sh\n(.*?)```", procedure, re.DOTALL)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip()]


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        ("gcloud services enable", "gcloud artifacts repositories create"),
        ("artifactregistry.googleapis.com cloudbuild.googleapis.com", "gcloud builds submit"),
        ("gcloud artifacts repositories create", "gcloud builds submit"),
        ("gcloud iam service-accounts create deferred-jobs-build", "gcloud builds submit"),
        ("gcloud builds submit", "pulumi config set image"),
        ("pulumi config set image", "pulumi up"),
    ],
)
def test_the_procedure_creates_what_each_step_needs_before_it(earlier: str, later: str) -> None:
    commands = _procedure_commands()
    first = min(i for i, line in enumerate(commands) if earlier in line)
    last_later = [i for i, line in enumerate(commands) if later in line]
    assert last_later and first < min(last_later), (earlier, later)


def test_every_gcloud_command_of_the_procedure_names_its_project() -> None:
    commands = [c for c in _procedure_commands() if c.startswith("gcloud ")]
    assert len(commands) >= 8
    for command in commands:
        if command.startswith(("gcloud auth", "gcloud storage buckets add-iam-policy-binding")):
            continue  # not project-scoped: credentials, or a bucket named in full
        if command.startswith("gcloud projects "):
            assert '"$PROJECT"' in command.split()[3], command  # the project is the argument
            continue
        assert "--project" in command, command
