"""The image tier's tools: build the stand-in base and the project's image, run containers.

Every command is podman's (or buildah's, through tests/image/stand_in_base.sh) with the host
facts docs/image.md lists: `--runtime runc`, explicit `--ulimit`, and the host's CA bundle only
as a read-only bind mount of the build's RUN steps, never copied into the image.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from emulators.cloudrun import image as container_image

ROOT = Path(__file__).resolve().parents[2]
BASE_SCRIPT = ROOT / "tests" / "image" / "stand_in_base.sh"
SUITE = "bookworm"
BASE_IMAGE = f"localhost/deferred-jobs-base:stand-in-{SUITE}"
APP_IMAGE = "localhost/deferred-jobs:image-test"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TOOLS = ("podman", "buildah", "mmdebstrap", "runc")
BUILD_TIMEOUT_S = 1800


def podman(
    *args: str, timeout_s: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


def build_base(name: str = BASE_IMAGE) -> str:
    """The stand-in base, built once per machine (`podman rmi` it to rebuild)."""
    if not image_exists(name):
        done = subprocess.run(
            [str(BASE_SCRIPT), name, SUITE],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"stand_in_base.sh failed:\n{done.stdout}\n{done.stderr}"
    return name


def build_app(base: str, name: str = APP_IMAGE) -> str:
    """The project's Dockerfile, unchanged, FROM the stand-in (`--from` replaces only FROM)."""
    return build(ROOT, name, f"--from={base}")


def build(context: Path, name: str, *flags: str, dockerfile: str = "Dockerfile") -> str:
    """`podman build` of `context`'s `dockerfile` as `name`, from local images only."""
    mount = []
    if HOST_CA_BUNDLE.is_file():
        # The build network may re-sign TLS with a local CA: pip in the RUN steps needs the
        # host's bundle, read-only and never part of a layer.
        mount = [f"--volume={HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
    podman(
        "build",
        "--pull=never",
        *flags,
        f"--runtime={container_image.RUNTIME}",
        *container_image.ulimits(),
        *mount,
        f"--tag={name}",
        f"--file={context / dockerfile}",
        str(context),
        timeout_s=BUILD_TIMEOUT_S,
    )
    return name


def run_flags() -> list[str]:
    return [f"--runtime={container_image.RUNTIME}", *container_image.ulimits()]


def run(
    image: str,
    *command: str,
    env: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
    timeout_s: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`podman run --rm` in the foreground; `command` replaces the image's CMD when given."""
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    return podman(
        "run",
        "--rm",
        *run_flags(),
        *flags,
        *extra,
        image,
        *command,
        timeout_s=timeout_s,
        check=False,
    )


def shell(image: str, script: str, *, as_root: bool = False) -> str:
    """stdout of `sh -c script` in a throw-away container of `image` (must exit 0), as the
    image's user unless `as_root` (to read what the image's user may not)."""
    done = run(image, "sh", "-c", script, extra=["--user=0"] if as_root else ())
    assert done.returncode == 0, f"{script!r} exited {done.returncode}:\n{done.stderr}"
    return done.stdout
