"""`python -m emulators.monitoring --pubsub-admin http://127.0.0.1:8086 --port 8087`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from emulators.monitoring.server import pubsub_admin_source, start
from emulators.port_number import port_number
from emulators.stop_signal import StopSignal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulators.monitoring", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port_number, default=0, help="gRPC port (0 = any free)")
    parser.add_argument(
        "--pubsub-admin", required=True, help="the Pub/Sub emulator's admin URL, sampled"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        emulator = start(pubsub_admin_source(args.pubsub_admin), host=args.host, port=args.port)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    stop = StopSignal.on(signal.SIGINT, signal.SIGTERM)
    print(f"monitoring emulator listening on {emulator.address}", flush=True)
    stop.wait()
    emulator.stop()
    print("monitoring emulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
