"""Errors the Monitoring emulator answers with; each carries the gRPC status production uses."""

from __future__ import annotations

import grpc

from emulators.status_error import StatusError


class MonitoringEmulatorError(StatusError):
    """The Monitoring emulator could not serve the request."""


class InvalidArgument(MonitoringEmulatorError):
    """The request is malformed."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class Unimplemented(MonitoringEmulatorError):
    """A request Cloud Monitoring would serve that this emulator does not (it serves one metric
    for one reader)."""

    code = grpc.StatusCode.UNIMPLEMENTED
