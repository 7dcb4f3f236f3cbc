"""The built-in `http.request` action, declared like any plug-in's: call a named HTTP target (a
service in any language) for a job.

This is the one place the action's name, params schema and needs are written. The params name
a `target` the deployment configures (`JOBS_HTTP_TARGETS`, `services.jobs.http_targets`), a
`path` under it, optionally a `method` (POST by default) and a JSON `body`; never a URL. The
schema's deployment check refuses, at schedule time, a target the deployment does not name and
a path that could leave the target (no SSRF). The call itself is the worker's
(`services.worker.http_request`, referenced by `build`, so nothing here imports an HTTP client).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from services.jobs.actions import Action, Grant, Needs
from services.jobs.deployment import Deployment
from services.jobs.http_targets import (
    ENV_VARIABLE,
    MAX_PATH_BYTES,
    METHODS,
    TARGET_NAME,
    HttpTarget,
    request_params_problems,
)
from services.jobs.lanes import lane_key
from services.jobs.params import Field, ParamsSchema

ACTION_NAME = "http.request"
# What the stack grants the worker on each target that is a Cloud Run service of its project
# (infra/identity.py): Cloud Run's IAM check admits the worker's ID token.
RUN_INVOKER = "roles/run.invoker"


def target_rates(targets: Mapping[str, HttpTarget]) -> dict[str, float]:
    """Each target's claim rate under its lane key (`http.request/<target>`): what the scan
    adds to the catalogue's budgets (`lanes.claim_rates(catalogue, target_rates(...))`)."""
    return {
        lane_key(ACTION_NAME, name): target.rate
        for name, target in sorted(targets.items())
        if target.rate is not None
    }


def targets_check(params: Mapping[str, Any], deployment: Deployment) -> list[str]:
    """The deployment's part of the check: a configured target, a path that stays under it,
    a method, a body that fits (`services.jobs.http_targets.request_params_problems`)."""
    return request_params_problems(params, deployment.http_targets)


HTTP_REQUEST_PARAMS = ParamsSchema(
    action=ACTION_NAME,
    fields=(
        Field(
            "target",
            "string",
            required=True,
            pattern=TARGET_NAME,
            describe="a target name (lowercase letters, digits and '-')",
        ),
        Field("path", "string", required=True, max_bytes=MAX_PATH_BYTES),
        Field(
            "method",
            "string",
            pattern=re.compile(rf"^({'|'.join(METHODS)})\Z"),
            describe=f"one of {', '.join(METHODS)}",
        ),
        Field("body", "json"),
    ),
    check=targets_check,
)

HTTP_REQUEST = Action(
    name=ACTION_NAME,
    build="services.worker.http_request:build_http_request",
    params=HTTP_REQUEST_PARAMS,
    policy=None,  # the worker's configured policy (JOBS_RETRY_LATER_DELAY_S, ...)
    # Each target's own `rate` is its budget (the scan reads the targets, issue 32 item 4).
    budget=None,
    needs=Needs(
        settings=(ENV_VARIABLE,),
        grants=(Grant("run-service:httpTargets", role=RUN_INVOKER),),
    ),
    description="Call a named HTTP target (any language) with the worker's ID token.",
)
