"""The argparse type of every port flag: a TCP port, 0 meaning any free one."""

from __future__ import annotations

import argparse

MAX_PORT = 65535


def port_number(text: str) -> int:
    """`8080` → 8080; outside 0-65535 is a usage error (bind() would raise OverflowError, and
    gRPC silently binds some other port)."""
    try:
        port = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-{MAX_PORT})") from exc
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0-{MAX_PORT})")
    return port
