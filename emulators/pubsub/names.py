"""Resource names (`projects/P/topics/T`, `projects/P/subscriptions/S`), checked as production."""

from __future__ import annotations

import re
from typing import NamedTuple

from emulators.pubsub.exceptions import InvalidArgument

# Production: 3-255 characters, starting with a letter, from letters, digits and -_.~+%.
_RESOURCE_ID = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$")
# Lenient on purpose: local projects are often named "test-project" or "local".
_PROJECT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9\-_.:]{0,99}$")


class ResourceName(NamedTuple):
    """A parsed topic or subscription name."""

    project: str
    kind: str
    resource_id: str

    def __str__(self) -> str:
        return f"projects/{self.project}/{self.kind}/{self.resource_id}"


def parse(name: str, kind: str) -> ResourceName:
    """Split `name` into its parts, or raise InvalidArgument naming what is wrong."""
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != kind:
        raise InvalidArgument(f"Invalid [{kind}] name: (name={name})")
    project, resource_id = parts[1], parts[3]
    if not _PROJECT_ID.match(project):
        raise InvalidArgument(f"Invalid project ID in [{kind}] name: (name={name})")
    if not _RESOURCE_ID.match(resource_id) or resource_id.lower().startswith("goog"):
        raise InvalidArgument(
            f"Invalid resource name given (name={name}). Refer to the naming documentation."
        )
    return ResourceName(project, kind, resource_id)


def topic(name: str) -> ResourceName:
    return parse(name, "topics")


def subscription(name: str) -> ResourceName:
    return parse(name, "subscriptions")


def project(parent: str) -> str:
    """The project ID of a `projects/P` parent."""
    parts = parent.split("/")
    if len(parts) != 2 or parts[0] != "projects" or not _PROJECT_ID.match(parts[1]):
        raise InvalidArgument(f"Invalid [projects] name: (name={parent})")
    return parts[1]
