"""The RPC a handler serves, as far as waiting is concerned: is the client still there, and
until when will it wait.

A handler that waits for a document lock must stop as soon as its caller has gone (cancelled
the RPC or let its deadline pass): otherwise it would go on waiting for a client that already
rolled the transaction back, and take a lock for nobody.
"""

from __future__ import annotations

import time
from typing import Any

# A caller's deadline is at most this far away for the purpose of waiting (the emulator's own
# lock deadline is much shorter anyway); gRPC reports "no deadline" as None or a huge number.
_FAR_S = 365 * 24 * 3600.0


class Call:
    """One RPC in progress; ``Call()`` stands for a caller that never goes away."""

    def __init__(self, context: Any | None = None) -> None:
        self._context = context
        self.deadline: float | None = None  # time.monotonic() value
        if context is not None:
            remaining = context.time_remaining()
            if remaining is not None and remaining < _FAR_S:
                self.deadline = time.monotonic() + max(0.0, remaining)

    def active(self) -> bool:
        """False once the client cancelled the RPC or its deadline passed."""
        if self._context is not None and not self._context.is_active():
            return False
        return self.deadline is None or time.monotonic() < self.deadline
