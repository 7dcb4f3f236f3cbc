"""A gRPC server for an emulator: local limits, and a port that is refused when taken."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc


def new_server(max_workers: int, thread_name_prefix: str, max_message_bytes: int) -> grpc.Server:
    """An unstarted server whose messages may be up to `max_message_bytes` either way."""
    return grpc.server(
        ThreadPoolExecutor(max_workers, thread_name_prefix=thread_name_prefix),
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            # gRPC sets SO_REUSEPORT by default, so a second emulator would silently
            # share the port with the first; without it the bind fails as it should.
            ("grpc.so_reuseport", 0),
        ],
    )


def bind(server: grpc.Server, address: str) -> int:
    """Listen on `address` ("host:port", port 0 picks one); the port, or OSError when taken."""
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(str(exc)) from exc
    if bound == 0:
        raise OSError("address in use")
    return int(bound)
