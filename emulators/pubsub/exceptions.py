"""Errors the emulator answers with; each carries the gRPC status production uses for it."""

from __future__ import annotations

import grpc

from emulators.status_error import StatusError


class PubsubEmulatorError(StatusError):
    """The Pub/Sub emulator could not serve the request."""


class InvalidArgument(PubsubEmulatorError):
    """The request is malformed or breaks a Pub/Sub limit."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(PubsubEmulatorError):
    """Resource not found."""

    code = grpc.StatusCode.NOT_FOUND


class OutOfRange(PubsubEmulatorError):
    """A setting outside its documented range, where Google's emulator answers OUT_OF_RANGE."""

    code = grpc.StatusCode.OUT_OF_RANGE


class AlreadyExists(PubsubEmulatorError):
    """Resource already exists in the project."""

    code = grpc.StatusCode.ALREADY_EXISTS


class PortInUse(PubsubEmulatorError):
    """A port the emulator was asked to listen on is already in use."""
