"""`make run` puts each service behind the local Cloud Run front end, deployed as infra deploys
it: same service names, sole invokers, timeouts and concurrencies; the services are configured
as behind Cloud Run IAM and see only forwarded (stripped) tokens."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from infra import api as infra_api
from infra import env as infra_env
from infra.config import SETTINGS
from services.edge.resource_names import Names
from services.local import cloud_run
from services.local.topology import Topology
from tests.integration.local.test_local_stack import TIMEOUT_S, _start

# It starts whole local stacks: one at a time (see tests/unit/test_make.py).
pytestmark = pytest.mark.xdist_group("local_stack")


def test_local_deployments_use_infras_defaults_and_invokers() -> None:
    defaults = {setting.name: setting.default for setting in SETTINGS}
    assert defaults["scanAttemptDeadlineS"] == cloud_run.SCAN_TIMEOUT_S
    assert defaults["scanConcurrency"] == cloud_run.SCAN_CONCURRENCY
    assert defaults["workerRequestTimeoutS"] == cloud_run.WORKER_TIMEOUT_S
    assert defaults["workerConcurrency"] == cloud_run.WORKER_CONCURRENCY
    assert defaults["apiConcurrency"] == cloud_run.API_CONCURRENCY
    assert infra_api.REQUEST_TIMEOUT_S == cloud_run.API_TIMEOUT_S
    prefix = SimpleNamespace(name_prefix=defaults["namePrefix"])
    assert infra_api.ApiNames.for_stack(prefix).service == cloud_run.API_SERVICE  # type: ignore[arg-type]
    topology = Topology("p", Names.for_prefix())
    assert list(cloud_run.deployments(topology)) == ["scan", "worker"]  # no callers, no api
    producer = "deferred-jobs-producer@p.iam.gserviceaccount.com"
    scan, worker, api = cloud_run.deployments(topology, (producer,)).values()
    assert (scan.service, scan.invokers) == ("deferred-jobs-scan", (topology.scheduler_email,))
    assert (worker.service, worker.invokers) == ("deferred-jobs-worker", (topology.pusher_email,))
    assert (api.target, api.service, api.invokers) == ("api", "deferred-jobs-api", (producer,))


def test_each_local_container_runs_as_many_threads_as_its_front_end_admits_as_infra_sets() -> None:
    # Before (issue 33, finding 7): 4 x CPUs threads behind a front end admitting 80 (api) or
    # 10 (worker), so admitted requests queued in the container and ended in 504, not 429.
    producer = "deferred-jobs-producer@p.iam.gserviceaccount.com"
    topology = Topology("p", Names.for_prefix())
    for deployment in cloud_run.deployments(topology, (producer,)).values():
        server = deployment.container_environment()
        assert server == infra_env.server_environment(deployment.concurrency, deployment.timeout_s)
        assert server[infra_env.THREADS] == str(deployment.concurrency)


def test_a_front_end_admits_each_of_several_invokers() -> None:
    deployment = cloud_run.Deployment("api", "svc", ("a@p.iam.gserviceaccount.com", "b@x"), 30, 8)
    argv = cloud_run.front_end_argv(
        deployment, ["serve"], host="127.0.0.1", port=1, certs_url="http://c"
    )
    assert [a for a in argv if a.startswith("--invoker")] == [
        "--invoker=a@p.iam.gserviceaccount.com",
        "--invoker=b@x",
    ]


def _env(log_dir: Path) -> dict[str, str]:
    lines = (log_dir / "env").read_text().splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines)


def test_the_running_stack_answers_as_cloud_run_and_the_scan_sees_stripped_tokens(
    tmp_path: Path,
) -> None:
    proc = _start(tmp_path)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not any(line.startswith("demo done") for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stdout.readline())
        [scan_url] = re.findall(r"^scan +(http://\S+) +\(behind", "".join(lines), re.MULTILINE)
        certs_url = _env(tmp_path)["JOBS_OIDC_CERTS_URL"]
        token_url = certs_url.replace("/oauth2/v1/certs", "/token")
        scheduler = Topology("deferred-jobs-local", Names.for_prefix()).scheduler_email

        def token(email: str) -> str:
            reply = requests.post(
                token_url, json={"audience": scan_url, "email": email}, timeout=10
            )
            return str(reply.json()["token"])

        good = token(scheduler)
        stripped = good.rsplit(".", 1)[0] + ".SIGNATURE_REMOVED_BY_GOOGLE"
        answers = {
            name: requests.post(scan_url, headers=headers, data=b"", timeout=60)
            for name, headers in {
                "invoker": {"Authorization": f"Bearer {good}"},
                "no token": {},
                "not an invoker": {"Authorization": f"Bearer {token('x@evil.example')}"},
                "replayed stripped token": {"Authorization": f"Bearer {stripped}"},
            }.items()
        }
        # Straight to the container (as only Cloud Run can reach it): the scan, configured as
        # behind Cloud Run IAM, takes the stripped token the front end would have forwarded.
        [port] = re.findall(r"on port (\d+)", (tmp_path / "scan.log").read_text())
        container = f"http://127.0.0.1:{port}"
        answers["container"] = requests.post(
            container, headers={"Authorization": f"Bearer {stripped}"}, data=b"", timeout=60
        )
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert answers["invoker"].status_code == 200, answers["invoker"].text
    assert "run_id" in answers["invoker"].json()
    assert answers["no token"].status_code == 403
    assert answers["not an invoker"].status_code == 403
    assert answers["replayed stripped token"].status_code == 401
    refused = ("no token", "not an invoker", "replayed stripped token")
    assert all("<title>" in answers[name].text for name in refused)
    assert answers["container"].status_code == 200, answers["container"].text


def test_direct_mode_runs_the_demo_without_front_ends(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--exit-when-done", "--direct")
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err + out
    assert "demo done: 3/3 due jobs completed" in out
    assert "behind the local Cloud Run front end" not in out
    assert "cloud run ready" not in (tmp_path / "scan.log").read_text()


def test_with_invoker_iam_disabled_the_services_verify_every_signature_themselves(
    tmp_path: Path,
) -> None:
    proc = _start(tmp_path, "--invoker-iam-disabled")
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not any(line.startswith("demo done") for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stdout.readline())
        [scan_url] = re.findall(r"^scan +(http://\S+) +\(behind", "".join(lines), re.MULTILINE)
        # No invoker check in front: the scan's own JSON answers, and a stripped token (which
        # only Cloud Run's check could vouch for) is refused.
        no_token = requests.post(scan_url, timeout=30)
        token_url = _env(tmp_path)["JOBS_OIDC_CERTS_URL"].replace("/oauth2/v1/certs", "/token")
        scheduler = Topology("deferred-jobs-local", Names.for_prefix()).scheduler_email
        reply = requests.post(
            token_url, json={"audience": scan_url, "email": scheduler}, timeout=10
        )
        token = str(reply.json()["token"]).rsplit(".", 1)[0] + ".SIGNATURE_REMOVED_BY_GOOGLE"
        stripped = requests.post(scan_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        [api_url] = re.findall(r"^api +(http://\S+) +\(behind", "".join(lines), re.MULTILINE)
        api_no_token = requests.get(api_url + "/v1/jobs/x", timeout=30)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert no_token.status_code == 401
    # The scan's own answer, in Google's error model (services/edge/error_model.py).
    assert no_token.json()["error"]["status"] == "UNAUTHENTICATED"
    assert stripped.status_code == 401
    assert "not configured as behind Cloud Run IAM" in stripped.json()["error"]["message"]
    # The api too answers for itself, in the same format.
    assert api_no_token.status_code == 401
    assert api_no_token.json()["error"]["status"] == "UNAUTHENTICATED"
