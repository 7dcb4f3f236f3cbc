"""This repository's own stack: one `DeferredJobs` component configured by `Pulumi.<stack>.yaml`.

Its component is named after the stack's `namePrefix`, so its resources are
`<namePrefix>-<role>`, like its Google-side names. A stack deployed before the program was a
component keeps its resources: each child carries the alias of its former top-level self.
"""

from __future__ import annotations

from infra.component import DeferredJobs
from infra.config import load_config


def deploy_stack() -> DeferredJobs:
    """What `__main__.py` runs under Pulumi, and the tests under mocks."""
    config = load_config()
    return DeferredJobs(config.name_prefix, config, moved_from_top_level=True)
