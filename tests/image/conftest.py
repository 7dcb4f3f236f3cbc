"""The image tier (`make image-test`): the project's Dockerfile built on a stand-in base and run
with podman, as docs/image.md describes. Not part of `make test` (it needs podman, buildah,
mmdebstrap and runc, and a few minutes); the make target installs them with apt if missing.
"""

from __future__ import annotations

import shutil

import pytest

from tests.image import podman


@pytest.fixture(scope="session")
def base_image() -> str:
    missing = [tool for tool in podman.TOOLS if shutil.which(tool) is None]
    # Not a skip: this tier runs only where asked for, and then it must run.
    assert not missing, f"missing {missing}: apt-get install -y {' '.join(podman.TOOLS)}"
    return podman.build_base()


@pytest.fixture(scope="session")
def app_image(base_image: str) -> str:
    return podman.build_app(base_image)
