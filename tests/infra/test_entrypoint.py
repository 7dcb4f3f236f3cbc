"""`infra/__main__.py` runs the way Pulumi's Python host runs it: `runpy.run_path(".")` from
inside `infra/`, with `infra/` (not the repository root) on sys.path.

Run in a fresh interpreter that never imports `tests` or `infra` itself, so only the program's
own sys.path fix can make `import infra...` work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.infra.conftest import DEPLOYER_CONFIG, PROJECT, ROOT, TEST_IMAGE, stack_config

_HOST = textwrap.dedent(
    """
    import json, runpy, sys
    import pulumi
    from pulumi.runtime import settings

    class Mocks(pulumi.runtime.Mocks):
        types = []

        def new_resource(self, args):
            Mocks.types.append(args.typ)
            state = dict(args.inputs)
            if args.typ == "gcp:serviceaccount/account:Account":
                state["email"] = args.inputs["accountId"] + "@p.iam.gserviceaccount.com"
            if args.typ == "gcp:projects/serviceIdentity:ServiceIdentity":
                state["member"] = "serviceAccount:service-1@gcp-sa-pubsub.iam.gserviceaccount.com"
            return args.name + "-id", state

        def call(self, args):
            if args.token == "gcp:storage/getBucket:getBucket":  # the bucket exists
                return {"name": args.args["name"]}, []
            return {"number": "123456789012"}, []

    pulumi.runtime.set_mocks(Mocks(), project="deferred-jobs", stack="dev", preview=False)
    pulumi.runtime.set_all_config(json.loads(sys.argv[1]))

    @pulumi.runtime.test
    def program():
        runpy.run_path(".", run_name="__main__")

    program()
    print(json.dumps({
        "infra_on_path": any(p in (".", "") for p in sys.path),
        "types": sorted(set(Mocks.types)),
        "outputs": sorted(settings.get_root_resource().outputs),
    }))
    """
)


def _pulumi_strings(config: dict[str, object]) -> dict[str, str]:
    return {
        key: json.dumps(value)
        if isinstance(value, list)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
        for key, value in config.items()
    }


def _dev_config_with_image() -> dict[str, object]:
    # The image and the deployer's own values are set per stack, never committed (docs/deploy.md).
    return {**stack_config("dev"), **DEPLOYER_CONFIG["dev"], f"{PROJECT}:image": TEST_IMAGE}


def test_main_runs_under_the_python_host_layout_and_exports_every_output() -> None:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", _HOST, json.dumps(_pulumi_strings(_dev_config_with_image()))],
        cwd=ROOT / "infra",
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["outputs"] == sorted(
        [
            "api_url",
            "dead_letter_subscription",
            "dead_letter_topic",
            "scan_url",
            "scheduler_job",
            "subscription",
            "topic",
            "worker_url",
        ]
    )
    assert "gcp:cloudrunv2/service:Service" in report["types"]
    assert report["infra_on_path"] is False
