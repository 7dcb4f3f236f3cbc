"""Errors the emulator answers with; each carries the gRPC status production would return."""

from __future__ import annotations

import grpc

from emulators.status_error import StatusError


class EmulatorError(StatusError):
    """The Firestore emulator could not serve the request."""


class InvalidArgument(EmulatorError):
    """The request is invalid."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(EmulatorError):
    """No document to update."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(EmulatorError):
    """Document already exists."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(EmulatorError):
    """The document's update time does not match the precondition."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(EmulatorError):
    """Too much contention on these documents. Please try again."""

    code = grpc.StatusCode.ABORTED


class Cancelled(EmulatorError):
    """The caller cancelled the request."""

    code = grpc.StatusCode.CANCELLED


class DeadlineExceeded(EmulatorError):
    """Deadline exceeded."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unimplemented(EmulatorError):
    """This method is not implemented by the built-in emulator."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Injected(EmulatorError):
    """Fault injected by the emulator's admin API."""

    def __init__(self, code: grpc.StatusCode, message: str | None = None) -> None:
        super().__init__(message or f"injected fault: {code.name}")
        self.code = code
