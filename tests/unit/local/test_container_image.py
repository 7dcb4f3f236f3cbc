"""The front end's container mode (`emulators/cloudrun/image.py`) and `--image`: the podman
command carries the host facts and passes variables by name only."""

from __future__ import annotations

import resource

import pytest

from emulators.cloudrun import image
from services.local.__main__ import parse_args


def test_the_podman_command_runs_the_target_on_the_hosts_loopback_with_runc() -> None:
    argv = image.run_argv(
        "localhost/app:1", "worker", ["JOBS_PROJECT", "FIRESTORE_EMULATOR_HOST"], run_id="r-1"
    )
    assert argv[:3] == ["podman", "run", "--rm"] and argv[-1] == "localhost/app:1"
    assert "--runtime=runc" in argv and "--network=host" in argv
    assert f"--label={image.RUN_LABEL}=r-1" in argv
    assert "--env=HOST=127.0.0.1" in argv
    assert "--env=FUNCTION_TARGET=worker" in argv
    assert "--env=FUNCTION_SOURCE=services/worker/main.py" in argv
    # Cloud Run's variables and the stack's, by name: podman copies their values.
    for name in ("PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION", "JOBS_PROJECT"):
        assert f"--env={name}" in argv
    assert "--env=FIRESTORE_EMULATOR_HOST" in argv


def test_the_ulimits_stay_within_the_hosts_hard_limits() -> None:
    flags = image.ulimits()
    nofile = next(f for f in flags if f.startswith("nofile="))
    soft, hard = (int(v) for v in nofile.removeprefix("nofile=").split(":"))
    host_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert soft == hard and (host_hard == resource.RLIM_INFINITY or hard <= host_hard)
    assert f"nproc={image.NPROC}:{image.NPROC}" in flags


def test_image_mode_needs_the_front_ends(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--image", "localhost/app:1", "--direct"])
    assert exited.value.code == 2
    assert "--image" in capsys.readouterr().err
    assert parse_args(["--image", "localhost/app:1"]).image == "localhost/app:1"
    assert parse_args([]).image is None
