"""How one emulator method becomes a gRPC handler: faults first, errors mapped to statuses."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from emulators.pubsub.exceptions import InvalidArgument, PubsubEmulatorError
from emulators.pubsub.faults import FaultPlan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Method:
    """One RPC: its short name, implementation, and the protobuf classes on the wire."""

    name: str
    function: Callable[..., Any]
    request: Any
    response: Any
    streaming: bool = False


def unary(name: str, function: Callable[..., Any], request: Any, response: Any) -> Method:
    return Method(name, function, request, response)


def bidi(name: str, function: Callable[..., Any], request: Any, response: Any) -> Method:
    return Method(name, function, request, response, streaming=True)


def generic_handler(
    service_name: str, methods: list[Method], faults: FaultPlan
) -> grpc.GenericRpcHandler:
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in methods:
        if method.streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _guard_stream(method, faults),
                response_serializer=method.response.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _guard_unary(method, faults),
                response_serializer=method.response.SerializeToString,
            )
    return grpc.method_handlers_generic_handler(service_name, handlers)


def _decode(method: Method, raw: bytes) -> Any:
    # Decoding here rather than in gRPC's deserializer lets a malformed request get
    # INVALID_ARGUMENT, as from production, instead of gRPC's generic INTERNAL.
    try:
        return method.request.FromString(raw)
    except DecodeError as exc:
        raise InvalidArgument(f"Invalid {method.name} request: {exc}") from exc


def _decoded(method: Method, raws: Iterator[bytes]) -> Iterator[Any]:
    for raw in raws:
        yield _decode(method, raw)


def _suffer_fault(method: Method, faults: FaultPlan, context: grpc.ServicerContext) -> None:
    fault = faults.take(method.name)
    if fault is None:
        return
    if fault.delay_s > 0:
        time.sleep(fault.delay_s)
    if fault.status is not None:
        context.abort(fault.status, f"injected fault on {method.name}")


def _abort(method: Method, exc: Exception, context: grpc.ServicerContext) -> None:
    """End the call with the error's own status, or INTERNAL (logged) for anything else."""
    if isinstance(exc, PubsubEmulatorError):
        context.abort(exc.code, str(exc))
        return  # abort raises; without it, never also answer INTERNAL
    logger.exception("%s failed", method.name)
    context.abort(grpc.StatusCode.INTERNAL, f"emulator error: {exc}")


def _guard_unary(method: Method, faults: FaultPlan) -> Callable[[Any, Any], Any]:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        _suffer_fault(method, faults, context)
        try:
            return method.function(_decode(method, request), context)
        except Exception as exc:
            _abort(method, exc, context)

    return handle


def _guard_stream(method: Method, faults: FaultPlan) -> Callable[[Any, Any], Iterator[Any]]:
    def handle(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        _suffer_fault(method, faults, context)
        try:
            yield from method.function(_decoded(method, requests), context)
        except Exception as exc:
            _abort(method, exc, context)

    return handle
