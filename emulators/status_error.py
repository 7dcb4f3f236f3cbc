"""The base of the errors an emulator answers with: a gRPC status and a message."""

from __future__ import annotations

import grpc


class StatusError(Exception):
    """The emulator could not serve the request."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str | None = None) -> None:
        # Each subclass's docstring is its default message, as production words it.
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)
