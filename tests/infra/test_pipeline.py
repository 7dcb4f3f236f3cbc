"""deploy/cloudbuild.yaml: it parses, builds, pushes, records the digest and the serving
revisions, then previews and deploys the digest as the deploy account the guide creates with the
guide's roles. What only a real project can check (the build, the `up`) is the guide's."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import yaml

from infra.cloudrun import revision_tag
from infra.config import BILLED_SERVICES
from tests.infra.conftest import ROOT, TEST_IMAGE, StackRun
from tests.infra.test_deploy_guide import GUIDE

PIPELINE = ROOT / "deploy" / "cloudbuild.yaml"
PIPELINE_SECTION = GUIDE.split("## The deploy pipeline", 1)[1].split("\n## ", 1)[0]


def _pipeline() -> dict[str, Any]:
    document = yaml.safe_load(PIPELINE.read_text())
    assert isinstance(document, dict)
    return document


def _script(step: dict[str, Any]) -> str:
    return " ".join(step.get("args", []))


def test_the_steps_build_push_record_then_preview_and_deploy_in_order() -> None:
    steps = _pipeline()["steps"]
    assert [s["id"] for s in steps] == [
        "build",
        "push",
        "digest",
        "previous-revisions",
        "preview",
        "up",
    ]
    by_id = {s["id"]: s for s in steps}
    assert "${_IMAGE}:${SHORT_SHA}" in _script(by_id["build"])
    assert _script(by_id["push"]) == "push ${_IMAGE}:${SHORT_SHA}"
    assert "image_summary.digest" in _script(by_id["digest"])
    # The image is pinned by the digest just recorded, never by the tag.
    preview = _script(by_id["preview"])
    assert 'pulumi config set image "${_IMAGE}@$(cat /workspace/digest)"' in preview
    assert "--constraint constraints.txt" in preview
    assert preview.index("pulumi config set image") < preview.index("pulumi preview")
    assert "pulumi up" in _script(by_id["up"]) and "pulumi up" not in preview
    for step in (by_id["preview"], by_id["up"]):
        assert '--stack "${_STACK}"' in _script(step)
    assert {"/workspace/digest", "/workspace/previous-revisions.txt"} == set(
        _pipeline()["artifacts"]["objects"]["paths"]
    )


def test_the_pulumi_image_is_the_cli_of_the_installed_sdk() -> None:
    from importlib.metadata import version

    images = {s["name"] for s in _pipeline()["steps"] if "pulumi" in s["name"]}
    assert images == {f"pulumi/pulumi-python:{version('pulumi')}"}
    assert pulumi  # the SDK the program is tested with


def test_every_deployable_service_has_its_serving_revision_recorded() -> None:
    step = next(s for s in _pipeline()["steps"] if s["id"] == "previous-revisions")
    listed = re.search(r"for service in ([a-z ]+); do", _script(step))
    assert listed is not None
    assert tuple(listed.group(1).split()) == BILLED_SERVICES


def test_it_runs_as_the_deploy_account_the_guide_creates_with_the_guides_roles() -> None:
    account = _pipeline()["serviceAccount"]
    assert account.endswith("/deferred-jobs-deploy@${PROJECT_ID}.iam.gserviceaccount.com")
    assert "gcloud iam service-accounts create deferred-jobs-deploy" in PIPELINE_SECTION
    loop = PIPELINE_SECTION.split("for role in ")[1].split("; do")[0]
    deploy_roles = {f"roles/{r}" for r in loop.replace("\\\n", " ").split()}
    person = GUIDE.split("### 1. Roles for the person who deploys")[1].split("### 2.")[0]
    person_loop = person.split("for role in ")[1].split("; do")[0]
    person_roles = {f"roles/{r}" for r in person_loop.replace("\\\n", " ").split()}
    # Step 1's roles, plus the build's logs and the state passphrase.
    assert deploy_roles == person_roles | {
        "roles/logging.logWriter",
        "roles/secretmanager.secretAccessor",
    }
    secret = _pipeline()["availableSecrets"]["secretManager"][0]["versionName"]
    assert "pulumi-config-passphrase" in secret and "pulumi-config-passphrase" in PIPELINE_SECTION


def test_the_guide_documents_the_rollback_to_the_previous_revision() -> None:
    rollback = PIPELINE_SECTION.split("### Rollout and rollback", 1)[1]
    assert "previous-revisions.txt" in rollback
    assert "gcloud run services update-traffic" in rollback and "--to-revisions=" in rollback


def test_every_service_routes_to_its_latest_revision_tagged_with_the_build(
    stack: StackRun,
) -> None:
    services = stack.of_type("cloudrunv2/service:Service")
    assert len(services) >= 3
    for service in services:
        assert service.state["traffics"] == [
            {
                "type": "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST",
                "percent": 100,
                "tag": "d-" + TEST_IMAGE.split("sha256:")[1][:12],
            }
        ], service.name


def test_a_tag_or_a_digest_names_the_revision_and_neither_leaves_it_untagged() -> None:
    assert revision_tag("r/app@sha256:" + "ab" * 32) == "d-abababababab"
    assert revision_tag("europe-west1-docker.pkg.dev/p/r/app:V1.2_rc") == "t-v1-2-rc"
    assert revision_tag("localhost:5000/app") is None
