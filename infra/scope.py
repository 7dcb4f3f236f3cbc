"""Where one deployment's resources go: their logical names and their parent.

A `DeferredJobs` component (infra/component.py) names every resource it registers
`<component name>-<role>` and parents it to itself, so two components in one Pulumi program,
or one beside a program's own resources, never register the same URN (a URN is the stack,
the project, the parent's type, the resource's type and its logical name: the parent's type
alone does not tell two components apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi


@dataclass(frozen=True)
class Scope:
    prefix: str
    parent: pulumi.Resource | None = None

    def name(self, role: str) -> str:
        """The logical name of this deployment's resource that plays `role`."""
        return f"{self.prefix}-{role}"

    def opts(
        self, *, depends_on: Sequence[pulumi.Resource] = (), **options: object
    ) -> pulumi.ResourceOptions:
        """Options parenting a resource to the component, after `depends_on`."""
        return pulumi.ResourceOptions(
            parent=self.parent,
            depends_on=list(depends_on),
            **options,  # type: ignore[arg-type]
        )
