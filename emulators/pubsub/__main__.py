"""`python -m emulators.pubsub --host 127.0.0.1 --port 8085 [--admin-port 8086]`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from emulators.port_number import port_number
from emulators.pubsub.exceptions import PortInUse
from emulators.pubsub.server import start
from emulators.stop_signal import StopSignal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulators.pubsub", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=port_number, default=8085, help="gRPC port (0 = any free port)"
    )
    parser.add_argument(
        "--admin-port", type=port_number, default=0, help="admin HTTP port (default: any free port)"
    )
    parser.add_argument(
        "--max-push-concurrency",
        type=int,
        default=16,
        help="push requests in flight at once per subscription",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        emulator = start(
            host=args.host,
            port=args.port,
            admin_port=args.admin_port,
            max_push_concurrency=args.max_push_concurrency,
        )
    except PortInUse as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = StopSignal.on(signal.SIGINT, signal.SIGTERM)
    print(f"pubsub emulator listening on {emulator.address}", flush=True)
    print(f"  export PUBSUB_EMULATOR_HOST={emulator.address}", flush=True)
    print(f"  admin: {emulator.admin_url}  certs: {emulator.certs_url}", flush=True)
    stop.wait()
    emulator.stop()
    print("pubsub emulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
